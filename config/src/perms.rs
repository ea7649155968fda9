//! Who may open what the daemon creates (docs/threat-model.md,
//! "Permissions").
//!
//! - The daemon's own files (stats, grants, SimGpu device) are created
//!   0600: its workers are its children and share its user.
//! - A VM's region (its region socket, region file or ivshmem socket) gets
//!   the VM's [`Access`]: 0600 unless its `[[vm]]` table names a `group`
//!   or `mode`, so no VM's guests can open another VM's region unless the
//!   configuration gives them both the same group.
//! - The control socket is 0600 (0660 with `[daemon] control_group`), and
//!   its directory is used only if it is safe ([`check_socket_dir`]).
//!
//! Invariants: a path's ownership and mode are changed only through a
//! descriptor opened with `O_NOFOLLOW` on a file of the expected type
//! owned by this user, so a symlink or a file swapped in by someone else is
//! refused, never followed. Modes only ever widen from 0600, so nothing is
//! open to others between creation and [`apply`].

use std::ffi::CString;
use std::fmt;
use std::fs::OpenOptions;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The mode of everything the daemon creates unless told otherwise.
pub const PRIVATE_MODE: u32 = 0o600;
/// The mode that lets a group open a region or socket as well.
pub const GROUP_MODE: u32 = 0o660;
/// Longest group name accepted.
const MAX_GROUP_NAME: usize = 256;
/// Largest buffer given to `getgrnam_r` (a group with many members).
const MAX_GROUP_BUF: usize = 1 << 20;

/// Why ownership or a mode could not be set, or a directory is unsafe.
#[derive(Debug, thiserror::Error)]
pub enum PermsError {
    /// The group named in the configuration does not exist.
    #[error("group {0:?} does not exist")]
    NoSuchGroup(String),
    /// Looking the group up failed.
    #[error("looking up group {name:?}")]
    GroupLookup {
        /// The group.
        name: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The path is not what the daemon just created there.
    #[error("{path} {why}")]
    Unexpected {
        /// The path.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// A directory that would hold a socket others could replace.
    #[error(
        "{dir} {why}: someone else could replace the socket in it; remove it or choose another path"
    )]
    UnsafeDir {
        /// The directory.
        dir: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// A system call failed.
    #[error("{what} {path}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// On which path.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
}

fn io_err<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> PermsError + 'a {
    move |source| PermsError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// A group as the configuration names it: a name or a numeric gid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSpec {
    /// A group name, looked up when it is applied.
    Name(String),
    /// A numeric gid.
    Id(u32),
}

impl GroupSpec {
    /// Parses `text` (a name of letters, digits, `_`, `-`, `.`, not
    /// starting with `-`, or a gid). The name is not looked up here.
    pub fn parse(text: &str) -> Result<GroupSpec, String> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return text
                .parse::<u32>()
                .ok()
                .filter(|g| *g != u32::MAX)
                .map(GroupSpec::Id)
                .ok_or_else(|| format!("{text:?} is not a gid"));
        }
        let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
        if text.is_empty()
            || text.len() > MAX_GROUP_NAME
            || text.starts_with('-')
            || !text.chars().all(ok)
        {
            return Err(format!(
                "{text:?} is not a group name or gid (letters, digits, '_', '-', '.')"
            ));
        }
        Ok(GroupSpec::Name(text.to_owned()))
    }

    /// The gid: the number, or the name looked up in the group database.
    pub fn resolve(&self) -> Result<u32, PermsError> {
        match self {
            GroupSpec::Id(gid) => Ok(*gid),
            GroupSpec::Name(name) => lookup_group(name),
        }
    }
}

impl fmt::Display for GroupSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupSpec::Name(n) => f.write_str(n),
            GroupSpec::Id(g) => write!(f, "{g}"),
        }
    }
}

/// Who may open a VM's region: the daemon's user, and the group when the
/// mode says so (`group`, or the daemon's own group when `None`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// [`PRIVATE_MODE`] or [`GROUP_MODE`].
    pub mode: u32,
    /// The group given the file; `None` keeps the daemon's.
    pub group: Option<GroupSpec>,
}

impl Default for Access {
    /// The daemon's user alone.
    fn default() -> Self {
        Access {
            mode: PRIVATE_MODE,
            group: None,
        }
    }
}

impl Access {
    /// Validates a `[[vm]]` table's `mode` and `group`. Neither: 0600.
    /// `group` alone: 0660 with that group. `mode = "0660"` alone: the
    /// daemon's group. Only 0600 and 0660 are accepted: a guest needs read
    /// and write to use a region, the daemon needs both too, and the
    /// region of one VM must never be open to every user of the host.
    pub fn from_config(mode: Option<&str>, group: Option<&str>) -> Result<Access, String> {
        let group = group
            .map(GroupSpec::parse)
            .transpose()
            .map_err(|e| format!("group = {e}"))?;
        let mode = match mode {
            None if group.is_some() => GROUP_MODE,
            None => PRIVATE_MODE,
            Some(text) => parse_mode(text)?,
        };
        if mode == PRIVATE_MODE {
            if let Some(g) = &group {
                return Err(format!(
                    "group = {:?} with mode = \"0600\" gives the group nothing; use mode = \"0660\" or leave group out",
                    g.to_string()
                ));
            }
        }
        Ok(Access { mode, group })
    }
}

impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04o}", self.mode)?;
        match (&self.group, self.mode & 0o070 != 0) {
            (Some(g), _) => write!(f, " group {g}"),
            (None, true) => f.write_str(" daemon's group"),
            (None, false) => Ok(()),
        }
    }
}

/// Parses a `mode` value: octal digits, optionally with a leading `0o`.
fn parse_mode(text: &str) -> Result<u32, String> {
    let digits = text.strip_prefix("0o").unwrap_or(text);
    let mode = (!digits.is_empty() && digits.len() <= 4)
        .then(|| u32::from_str_radix(digits, 8).ok())
        .flatten()
        .ok_or_else(|| format!("mode = {text:?} is not an octal mode such as \"0660\""))?;
    let why = if mode & 0o7000 != 0 {
        "has setuid, setgid or sticky bits"
    } else if mode & 0o007 != 0 {
        "opens the region to every user of the host; give a group access instead (group, mode = \"0660\")"
    } else if mode & 0o111 != 0 {
        "has execute bits"
    } else if mode & 0o600 != 0o600 {
        "takes read or write from the daemon's user, which needs both"
    } else if mode & 0o060 != 0 && mode & 0o060 != 0o060 {
        "gives the group read or write alone; a guest needs both to use a region"
    } else {
        return Ok(mode);
    };
    Err(format!(
        "mode = {text:?} {why}; use \"0600\" (the daemon's user alone) or \"0660\""
    ))
}

/// The effective uid of this process.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

/// Looks `name` up with `getgrnam_r` (NSS included).
fn lookup_group(name: &str) -> Result<u32, PermsError> {
    let cname = CString::new(name).map_err(|_| PermsError::NoSuchGroup(name.to_owned()))?;
    let mut buf = vec![0u8; 4096];
    loop {
        // SAFETY: all-zero bytes are a valid `group` (null pointers and 0).
        let mut grp: libc::group = unsafe { std::mem::zeroed() };
        let mut result: *mut libc::group = std::ptr::null_mut();
        // SAFETY: `cname` is NUL-terminated; `grp`, `buf` (of the length
        // passed) and `result` are valid for writes for the whole call and
        // outlive it; the strings written into `buf` are not used.
        let rc = unsafe {
            libc::getgrnam_r(
                cname.as_ptr(),
                &mut grp,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            )
        };
        match rc {
            0 if result.is_null() => return Err(PermsError::NoSuchGroup(name.to_owned())),
            0 => return Ok(grp.gr_gid),
            libc::ERANGE if buf.len() < MAX_GROUP_BUF => buf.resize(buf.len() * 2, 0),
            e => {
                return Err(PermsError::GroupLookup {
                    name: name.to_owned(),
                    source: io::Error::from_raw_os_error(e),
                })
            }
        }
    }
}

/// What a path is expected to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file (a region file).
    File,
    /// A unix socket.
    Socket,
}

/// Gives `path`, which this process just created, `access`'s group and
/// mode. Refuses a symlink, a file of another kind, or one owned by
/// another user (the path was swapped).
pub fn apply(path: &Path, kind: Kind, access: &Access) -> Result<(), PermsError> {
    let gid = access.group.as_ref().map(GroupSpec::resolve).transpose()?;
    // O_PATH: a socket cannot be opened otherwise; O_NOFOLLOW: a symlink
    // fails (ELOOP) instead of being followed.
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW)
        .open(path)
        .map_err(io_err("opening", path))?;
    let meta = file.metadata().map_err(io_err("inspecting", path))?;
    let expected = match kind {
        Kind::File => meta.file_type().is_file(),
        Kind::Socket => meta.file_type().is_socket(),
    };
    let why = if !expected {
        Some(format!(
            "is not a {}",
            if kind == Kind::File {
                "regular file"
            } else {
                "socket"
            }
        ))
    } else if meta.uid() != euid() {
        Some(format!("is owned by uid {}, not by this user", meta.uid()))
    } else {
        None
    };
    if let Some(why) = why {
        return Err(PermsError::Unexpected {
            path: path.to_owned(),
            why,
        });
    }
    // The descriptor's inode, whatever happens to `path` meanwhile.
    let inode = PathBuf::from(format!("/proc/self/fd/{}", file.as_raw_fd()));
    if let Some(gid) = gid {
        std::os::unix::fs::chown(&inode, None, Some(gid))
            .map_err(io_err("changing the group of", path))?;
    }
    std::fs::set_permissions(&inode, std::fs::Permissions::from_mode(access.mode))
        .map_err(io_err("changing the mode of", path))
}

/// Binds a listening unix socket at `path` with `access` applied before
/// it listens: until then a connect is refused, so no one outside
/// `access` can connect in between. `path` must not exist.
pub fn bind_listener(path: &Path, access: &Access) -> Result<UnixListener, PermsError> {
    let bytes = path.as_os_str().as_bytes();
    // SAFETY: all-zero bytes are a valid `sockaddr_un`.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(PermsError::Io {
            what: "binding",
            path: path.to_owned(),
            source: io::Error::from_raw_os_error(libc::ENAMETOOLONG),
        });
    }
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: socket takes no pointers; the result is checked below.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io_err("creating a socket for", path)(
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: `fd` is a fresh descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: `addr` is a valid, NUL-terminated `sockaddr_un` of the size
    // passed, alive for the call.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&raw const addr).cast(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io_err("binding", path)(io::Error::last_os_error()));
    }
    if let Err(e) = apply(path, Kind::Socket, access) {
        let _ = std::fs::remove_file(path);
        return Err(e);
    }
    // SAFETY: `fd` is a bound socket owned by this function.
    if unsafe { libc::listen(fd.as_raw_fd(), libc::SOMAXCONN) } != 0 {
        let e = io::Error::last_os_error();
        let _ = std::fs::remove_file(path);
        return Err(io_err("listening on", path)(e));
    }
    Ok(UnixListener::from(fd))
}

/// How much of [`check_socket_dir`] applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirTrust {
    /// A directory at a well-known path anyone could have created first
    /// (the default control-socket directory): it must be a real directory
    /// (not a symlink) of this user's, writable by no one else.
    Ours,
    /// A directory the configuration or the command line named: every
    /// user must not be able to write it (its group may: the operator
    /// chose it).
    Named,
}

/// Checks that the directory holding a socket lets no one else replace
/// the socket: see [`DirTrust`].
pub fn check_socket_dir(dir: &Path, trust: DirTrust) -> Result<(), PermsError> {
    let unsafe_dir = |why: String| PermsError::UnsafeDir {
        dir: dir.to_owned(),
        why,
    };
    let lmeta = std::fs::symlink_metadata(dir).map_err(io_err("inspecting", dir))?;
    let meta = if lmeta.file_type().is_symlink() {
        if trust == DirTrust::Ours {
            return Err(unsafe_dir("is a symlink, not a directory".into()));
        }
        std::fs::metadata(dir).map_err(io_err("inspecting", dir))?
    } else {
        lmeta
    };
    if !meta.is_dir() {
        return Err(unsafe_dir("is not a directory".into()));
    }
    if trust == DirTrust::Ours && meta.uid() != euid() {
        return Err(unsafe_dir(format!(
            "is owned by uid {}, not by this user (uid {})",
            meta.uid(),
            euid()
        )));
    }
    let mode = meta.permissions().mode() & 0o7777;
    let (forbidden, who) = match trust {
        DirTrust::Ours => (0o022, "group or others"),
        DirTrust::Named => (0o002, "every user"),
    };
    if mode & forbidden != 0 {
        return Err(unsafe_dir(format!(
            "is writable by {who} (mode {mode:04o})"
        )));
    }
    Ok(())
}

/// Creates `dir` with mode 0700 if it does not exist (its missing parents
/// too, 0700), then checks it ([`check_socket_dir`]). An existing one is
/// never changed, only checked.
pub fn ensure_socket_dir(dir: &Path, trust: DirTrust) -> Result<(), PermsError> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        if std::fs::symlink_metadata(parent).is_err() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(io_err("creating", parent))?;
        }
    }
    // mkdir itself: atomic, and it fails if anything, a symlink included,
    // is already there.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(io_err("creating", dir)(e)),
    }
    check_socket_dir(dir, trust)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("fairgpu-perms-{}-{name}", std::process::id()))
    }

    fn mode_of(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    #[test]
    fn access_defaults_and_errors() {
        assert_eq!(Access::from_config(None, None), Ok(Access::default()));
        assert_eq!(
            Access::from_config(None, Some("kvm")),
            Ok(Access {
                mode: 0o660,
                group: Some(GroupSpec::Name("kvm".into()))
            })
        );
        assert_eq!(
            Access::from_config(Some("0o660"), Some("107")),
            Ok(Access {
                mode: 0o660,
                group: Some(GroupSpec::Id(107))
            })
        );
        assert_eq!(
            Access::from_config(Some("660"), None).map(|a| a.to_string()),
            Ok("0660 daemon's group".into())
        );
        for (mode, group, want) in [
            (Some("0666"), None, "every user"),
            (Some("0606"), None, "every user"),
            (Some("0760"), None, "execute"),
            (Some("4660"), None, "setuid"),
            (Some("0460"), None, "daemon's user"),
            (Some("0640"), None, "read or write alone"),
            (Some("rw"), None, "octal"),
            (Some("0600"), Some("kvm"), "gives the group nothing"),
            (None, Some("-x"), "group ="),
            (None, Some("a b"), "group ="),
            (None, Some("4294967295"), "not a gid"),
        ] {
            let e = Access::from_config(mode, group).unwrap_err();
            assert!(e.contains(want), "{mode:?} {group:?}: {e}");
        }
    }

    #[test]
    fn groups_resolve_by_number_and_name() {
        assert_eq!(GroupSpec::Id(4242).resolve().unwrap(), 4242);
        assert!(matches!(
            GroupSpec::Name("fairgpu-no-such-group".into()).resolve(),
            Err(PermsError::NoSuchGroup(_))
        ));
        // "root" is gid 0 wherever it exists.
        if let Ok(gid) = GroupSpec::Name("root".into()).resolve() {
            assert_eq!(gid, 0);
        }
    }

    #[test]
    fn apply_sets_group_and_mode_and_refuses_symlinks() {
        let path = temp("file");
        let f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(PRIVATE_MODE)
            .open(&path)
            .unwrap();
        assert_eq!(mode_of(&path), 0o600);
        // SAFETY: getegid has no preconditions.
        let gid = unsafe { libc::getegid() };
        let access = Access {
            mode: 0o660,
            group: Some(GroupSpec::Id(gid)),
        };
        apply(&path, Kind::File, &access).unwrap();
        assert_eq!(mode_of(&path), 0o660);
        assert_eq!(f.metadata().unwrap().gid(), gid);
        assert!(matches!(
            apply(&path, Kind::Socket, &access),
            Err(PermsError::Unexpected { .. })
        ));
        let link = temp("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(apply(&link, Kind::File, &access).is_err());
        assert_eq!(mode_of(&path), 0o600, "the symlink's target was changed");
        std::fs::remove_file(&link).unwrap();
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn a_listener_is_bound_with_its_access() {
        let path = temp("sock");
        let l = bind_listener(&path, &Access::default()).unwrap();
        assert_eq!(mode_of(&path), 0o600);
        let c = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (_s, _) = l.accept().unwrap();
        drop(c);
        assert!(
            bind_listener(&path, &Access::default()).is_err(),
            "path in use"
        );
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn socket_dirs_others_could_write_or_swap_are_refused() {
        let base = temp("dirs");
        ensure_socket_dir(&base.join("new"), DirTrust::Ours).unwrap();
        assert_eq!(mode_of(&base.join("new")), 0o700);
        assert_eq!(mode_of(&base), 0o700, "missing parents are created 0700");

        let open = base.join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o1777)).unwrap();
        for (trust, who) in [
            (DirTrust::Ours, "group or others"),
            (DirTrust::Named, "every user"),
        ] {
            let e = ensure_socket_dir(&open, trust).unwrap_err().to_string();
            assert!(e.contains(&format!("writable by {who} (mode 1777)")), "{e}");
        }
        assert_eq!(
            mode_of(&open),
            0o1777,
            "an existing directory is not changed"
        );
        let shared = base.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o770)).unwrap();
        check_socket_dir(&shared, DirTrust::Named).unwrap();
        assert!(check_socket_dir(&shared, DirTrust::Ours).is_err());

        let link = base.join("link");
        std::os::unix::fs::symlink(base.join("new"), &link).unwrap();
        let e = check_socket_dir(&link, DirTrust::Ours)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("symlink") && e.contains(&link.display().to_string()),
            "{e}"
        );
        check_socket_dir(&link, DirTrust::Named).unwrap();

        let file = base.join("file");
        std::fs::write(&file, b"").unwrap();
        assert!(check_socket_dir(&file, DirTrust::Ours)
            .unwrap_err()
            .to_string()
            .contains("not a directory"));

        // Owned by someone else: only root can make one.
        if euid() == 0 {
            let theirs = base.join("theirs");
            std::fs::create_dir(&theirs).unwrap();
            std::os::unix::fs::chown(&theirs, Some(65534), None).unwrap();
            let e = check_socket_dir(&theirs, DirTrust::Ours)
                .unwrap_err()
                .to_string();
            assert!(e.contains("owned by uid 65534"), "{e}");
            check_socket_dir(&theirs, DirTrust::Named).unwrap();
        }
        std::fs::remove_dir_all(&base).unwrap();
    }
}
