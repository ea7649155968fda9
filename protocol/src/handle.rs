//! Opaque per-VM handles.
//!
//! The guest never sees a host pointer or a host-global id. It sees a
//! [`Handle`]: an index into a table that belongs to its own VM, plus a
//! generation that changes every time the slot is reused, so a stale or
//! forged handle is refused rather than aliasing someone else's object.
//! Handle 0 is never issued (it is the NULL handle of the CUDA API).

/// A 64-bit opaque handle: `generation << 32 | (index + 1)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

impl Handle {
    /// The NULL handle, never valid.
    pub const NULL: Handle = Handle(0);

    fn new(index: u32, generation: u32) -> Handle {
        Handle((u64::from(generation) << 32) | (u64::from(index) + 1))
    }

    fn parts(self) -> Option<(usize, u32)> {
        let idx = (self.0 as u32).checked_sub(1)?;
        Some((idx as usize, (self.0 >> 32) as u32))
    }
}

/// Why a handle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandleError {
    /// No live object has this handle (never issued, freed, or forged).
    #[error("invalid handle {0:#x}")]
    Invalid(u64),
    /// The table holds its maximum number of objects.
    #[error("handle table full ({0} entries)")]
    Full(usize),
}

#[derive(Debug)]
enum Slot<T> {
    Used {
        generation: u32,
        value: T,
    },
    Free {
        generation: u32,
        next_free: Option<usize>,
    },
}

/// A bounded table of objects addressed by [`Handle`]s.
#[derive(Debug)]
pub struct HandleTable<T> {
    slots: Vec<Slot<T>>,
    free_head: Option<usize>,
    len: usize,
    max: usize,
}

impl<T> HandleTable<T> {
    /// An empty table that will hold at most `max` objects.
    pub fn new(max: usize) -> Self {
        HandleTable {
            slots: Vec::new(),
            free_head: None,
            len: 0,
            max: max.min(u32::MAX as usize - 1),
        }
    }

    /// Number of live objects.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Host memory the table's slots may hold, bytes: twice the slots ever
    /// used (a `Vec` grown one push at a time never holds more), at least
    /// four. What the values own besides (their heap data) is not counted.
    pub fn host_bytes(&self) -> u64 {
        (2 * self.slots.len().max(4) * std::mem::size_of::<Slot<T>>()) as u64
    }

    /// Whether the table holds no objects.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Stores `value` and returns its new handle.
    pub fn insert(&mut self, value: T) -> Result<Handle, HandleError> {
        if self.len >= self.max {
            return Err(HandleError::Full(self.max));
        }
        self.len += 1;
        if let Some(i) = self.free_head {
            let Slot::Free {
                generation,
                next_free,
            } = self.slots[i]
            else {
                unreachable!("free list points at a used slot")
            };
            let generation = generation.wrapping_add(1).max(1);
            self.free_head = next_free;
            self.slots[i] = Slot::Used { generation, value };
            return Ok(Handle::new(i as u32, generation));
        }
        self.slots.push(Slot::Used {
            generation: 1,
            value,
        });
        Ok(Handle::new(self.slots.len() as u32 - 1, 1))
    }

    /// The object behind `h`.
    pub fn get(&self, h: Handle) -> Result<&T, HandleError> {
        match h
            .parts()
            .and_then(|(i, g)| self.slots.get(i).map(|s| (s, g)))
        {
            Some((Slot::Used { generation, value }, g)) if *generation == g => Ok(value),
            _ => Err(HandleError::Invalid(h.0)),
        }
    }

    /// The object behind `h`, mutably.
    pub fn get_mut(&mut self, h: Handle) -> Result<&mut T, HandleError> {
        match h
            .parts()
            .and_then(|(i, g)| self.slots.get_mut(i).map(|s| (s, g)))
        {
            Some((Slot::Used { generation, value }, g)) if *generation == g => Ok(value),
            _ => Err(HandleError::Invalid(h.0)),
        }
    }

    /// Removes and returns the object behind `h`; the handle is dead after.
    pub fn remove(&mut self, h: Handle) -> Result<T, HandleError> {
        self.get(h)?;
        let (i, g) = h.parts().ok_or(HandleError::Invalid(h.0))?;
        let old = std::mem::replace(
            &mut self.slots[i],
            Slot::Free {
                generation: g,
                next_free: self.free_head,
            },
        );
        self.free_head = Some(i);
        self.len -= 1;
        match old {
            Slot::Used { value, .. } => Ok(value),
            Slot::Free { .. } => unreachable!("checked by get above"),
        }
    }

    /// The live objects, in slot order.
    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.slots.iter().filter_map(|s| match s {
            Slot::Used { value, .. } => Some(value),
            Slot::Free { .. } => None,
        })
    }

    /// Removes every object for which `keep` returns false.
    pub fn retain(&mut self, mut keep: impl FnMut(&T) -> bool) {
        for i in 0..self.slots.len() {
            if let Slot::Used { generation, value } = &self.slots[i] {
                if !keep(value) {
                    let h = Handle::new(i as u32, *generation);
                    let _ = self.remove(h);
                }
            }
        }
    }

    /// Removes every object, returning them (for teardown of a dead guest).
    pub fn drain(&mut self) -> Vec<T> {
        let mut out = Vec::with_capacity(self.len);
        for i in 0..self.slots.len() {
            if let Slot::Used { generation, .. } = self.slots[i] {
                if let Ok(v) = self.remove(Handle::new(i as u32, generation)) {
                    out.push(v);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn stale_and_forged_handles_are_refused() {
        let mut t = HandleTable::new(4);
        let a = t.insert("a").unwrap();
        assert_ne!(a, Handle::NULL);
        assert_eq!(t.get(a), Ok(&"a"));
        assert_eq!(t.remove(a), Ok("a"));
        let b = t.insert("b").unwrap();
        assert_eq!(
            t.get(a),
            Err(HandleError::Invalid(a.0)),
            "stale handle must not alias"
        );
        assert_eq!(t.get(b), Ok(&"b"));
        assert!(t.get(Handle::NULL).is_err());
        assert!(t.get(Handle(u64::MAX)).is_err());
        for _ in 0..3 {
            t.insert("x").unwrap();
        }
        assert_eq!(t.insert("y"), Err(HandleError::Full(4)));
        t.retain(|v| *v != "x");
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(b), Ok(&"b"));
        t.insert("z").unwrap();
        assert_eq!(t.drain().len(), 2);
        assert!(t.is_empty());
    }

    proptest! {
        #[test]
        fn matches_a_map_model(ops in proptest::collection::vec((any::<bool>(), any::<u8>()), 0..200)) {
            let mut t = HandleTable::new(16);
            let mut live: Vec<(Handle, u8)> = Vec::new();
            let mut dead: Vec<Handle> = Vec::new();
            for (ins, v) in ops {
                if ins || live.is_empty() {
                    match t.insert(v) {
                        Ok(h) => live.push((h, v)),
                        Err(_) => prop_assert_eq!(live.len(), 16),
                    }
                } else {
                    let (h, v) = live.remove(v as usize % live.len());
                    prop_assert_eq!(t.remove(h), Ok(v));
                    dead.push(h);
                }
                for (h, v) in &live {
                    prop_assert_eq!(t.get(*h), Ok(v));
                }
                for h in &dead {
                    prop_assert!(t.get(*h).is_err());
                }
                prop_assert_eq!(t.len(), live.len());
            }
        }
    }
}
