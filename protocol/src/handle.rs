//! Opaque per-VM handles.
//!
//! The guest never sees a host pointer or a host-global id. It sees a
//! [`Handle`]: an index into a table that belongs to its own VM, plus a
//! generation that changes every time the slot is reused, so a stale or
//! forged handle is refused rather than aliasing someone else's object.
//! Handle 0 is never issued (it is the NULL handle of the CUDA API).
//!
//! A table may carry a tag ([`HandleTable::tagged`]), which every handle it
//! issues carries too: tables of different tags never accept each other's
//! handles, whatever their slots hold. Each CUDA context of a VM has its
//! own tag, so a stream or a function of one context named in another is
//! refused instead of naming whatever that context has in the same slot.

/// A 64-bit opaque handle: `generation << 32 | (index + 1)` from an
/// untagged table, `generation << 32 | tag << 20 | (index + 1)` from a
/// tagged one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle(pub u64);

impl Handle {
    /// The NULL handle, never valid.
    pub const NULL: Handle = Handle(0);

    fn new(index: u32, generation: u32, tag: u16) -> Handle {
        Handle(
            (u64::from(generation) << 32) | (u64::from(tag) << TAG_SHIFT) | (u64::from(index) + 1),
        )
    }

    /// Slot index and generation, if the handle carries `tag`.
    fn parts(self, tag: u16) -> Option<(usize, u32)> {
        let low = self.0 as u32;
        let (idx, t) = if tag == 0 {
            (low, 0)
        } else {
            (low & INDEX_MASK, low >> TAG_SHIFT)
        };
        if t != u32::from(tag) {
            return None;
        }
        let idx = idx.checked_sub(1)?;
        Some((idx as usize, (self.0 >> 32) as u32))
    }
}

/// Where a tagged table's tag sits in its handles, above the index.
const TAG_SHIFT: u32 = 20;
/// The index bits of a tagged table's handles.
const INDEX_MASK: u32 = (1 << TAG_SHIFT) - 1;
/// The largest tag.
pub const MAX_TAG: u16 = (1 << (32 - TAG_SHIFT)) - 1;

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
    tag: u16,
}

impl<T> HandleTable<T> {
    /// An empty table that will hold at most `max` objects.
    pub fn new(max: usize) -> Self {
        HandleTable {
            slots: Vec::new(),
            free_head: None,
            len: 0,
            max: max.min(u32::MAX as usize - 1),
            tag: 0,
        }
    }

    /// An empty table of at most `max` objects (and fewer than 2^20)
    /// whose handles carry `tag` (1 to [`MAX_TAG`]; 0 is an untagged
    /// table): no table of another tag accepts them.
    pub fn tagged(max: usize, tag: u16) -> Self {
        assert!(tag <= MAX_TAG, "tag {tag} past {MAX_TAG}");
        let mut t = HandleTable::new(max);
        if tag != 0 {
            t.max = t.max.min(INDEX_MASK as usize - 1);
        }
        t.tag = tag;
        t
    }

    /// The tag its handles carry (0: untagged).
    pub fn tag(&self) -> u16 {
        self.tag
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
            return Ok(Handle::new(i as u32, generation, self.tag));
        }
        self.slots.push(Slot::Used {
            generation: 1,
            value,
        });
        Ok(Handle::new(self.slots.len() as u32 - 1, 1, self.tag))
    }

    /// The object behind `h`.
    pub fn get(&self, h: Handle) -> Result<&T, HandleError> {
        match h
            .parts(self.tag)
            .and_then(|(i, g)| self.slots.get(i).map(|s| (s, g)))
        {
            Some((Slot::Used { generation, value }, g)) if *generation == g => Ok(value),
            _ => Err(HandleError::Invalid(h.0)),
        }
    }

    /// The object behind `h`, mutably.
    pub fn get_mut(&mut self, h: Handle) -> Result<&mut T, HandleError> {
        match h
            .parts(self.tag)
            .and_then(|(i, g)| self.slots.get_mut(i).map(|s| (s, g)))
        {
            Some((Slot::Used { generation, value }, g)) if *generation == g => Ok(value),
            _ => Err(HandleError::Invalid(h.0)),
        }
    }

    /// Removes and returns the object behind `h`; the handle is dead after.
    pub fn remove(&mut self, h: Handle) -> Result<T, HandleError> {
        self.get(h)?;
        let (i, g) = h.parts(self.tag).ok_or(HandleError::Invalid(h.0))?;
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
                    let h = Handle::new(i as u32, *generation, self.tag);
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
                if let Ok(v) = self.remove(Handle::new(i as u32, generation, self.tag)) {
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

    #[test]
    fn tables_of_different_tags_refuse_each_others_handles() {
        let mut a = HandleTable::tagged(8, 1);
        let mut b = HandleTable::tagged(8, 2);
        let mut plain = HandleTable::new(8);
        let ha = a.insert("a").unwrap();
        let hb = b.insert("b").unwrap();
        let hp = plain.insert("p").unwrap();
        // Same slot, same generation: only the tag tells them apart.
        assert_ne!(ha, hb);
        assert_eq!(a.get(ha), Ok(&"a"));
        assert_eq!(b.get(hb), Ok(&"b"));
        assert_eq!(b.get(ha), Err(HandleError::Invalid(ha.0)));
        assert_eq!(a.get(hb), Err(HandleError::Invalid(hb.0)));
        assert!(plain.get(ha).is_err());
        assert!(a.get(hp).is_err());
        assert!(b.remove(ha).is_err());
        assert_eq!(b.len(), 1);
        let top = HandleTable::<u8>::tagged(1 << 30, MAX_TAG);
        assert_eq!(top.max, (1 << 20) - 2);
        a.retain(|_| false);
        assert!(a.is_empty());
        let again = a.insert("c").unwrap();
        assert!(
            a.get(ha).is_err(),
            "a stale handle of a tagged table is refused"
        );
        assert_eq!(a.drain(), vec!["c"]);
        assert!(a.get(again).is_err());
    }

    proptest! {
        #[test]
        fn matches_a_map_model(ops in proptest::collection::vec((any::<bool>(), any::<u8>()), 0..200), tag in 0..=MAX_TAG) {
            let mut t = HandleTable::tagged(16, tag);
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
