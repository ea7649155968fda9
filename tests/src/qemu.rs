//! Helpers for the tests that boot the guest image of
//! `scripts/guest-image.sh` in QEMU (TCG).
//!
//! [`image`] finds QEMU and the image (or says why the test is skipped);
//! [`Overlay`] collects files to add to the image's initramfs (binaries,
//! the shared libraries `ldd` finds for them, the guest's `/guest/run`
//! script) and writes them as a second archive after the base one; [`Guest`]
//! boots QEMU with that initramfs and the fairgpu device's arguments on a
//! [`Machine`] (QEMU's default, or q35 with an IOMMU and the kernel
//! arguments it needs) and collects its serial console, bounded in time.
//!
//! The image's `/init` runs `/guest/run` if present, prints
//! `fairgpu-guest: exit STATUS` and powers the VM off, so QEMU (with
//! `-no-reboot`) exits when the guest is done.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{fairgpu_bin, run_command};

/// The QEMU binary the tests run.
pub const QEMU: &str = "qemu-system-x86_64";
/// Environment variable naming the image directory (default
/// `target/guest-image`).
pub const IMAGE_ENV: &str = "FAIRGPU_GUEST_IMAGE";
/// Environment variable that turns a missing QEMU or image into a failure.
pub const REQUIRE_ENV: &str = "FAIRGPU_REQUIRE_QEMU";
/// What the image's init prints once `/guest/run` has exited with 0.
pub const RUN_SUCCEEDED: &str = "fairgpu-guest: exit 0";
/// Guest directories on the dynamic loader's default search path: a
/// library found there on the host is put at the same path in the guest.
const SYSTEM_LIB_DIRS: [&str; 4] = ["/lib/", "/lib64/", "/usr/lib/", "/usr/lib64/"];

/// TCG boots are CPU-heavy: the tests of one binary take turns. Hold the
/// guard for as long as guests run.
pub fn take_turn() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// The kernel and base initramfs of the guest image.
#[derive(Debug, Clone)]
pub struct Image {
    /// The kernel.
    pub vmlinuz: PathBuf,
    /// The base initramfs (gzip-compressed newc).
    pub initrd: PathBuf,
}

impl Image {
    /// Whether the image was built with the vfio modules
    /// (scripts/guest-image.sh puts them in `lib/modules`): the initramfs is
    /// gzip, so look for the module's name in the decompressed archive.
    pub fn has_vfio(&self) -> bool {
        let out = Command::new("gzip")
            .arg("-dc")
            .arg(&self.initrd)
            .output()
            .expect("running gzip -dc on the initramfs");
        let needle = b"vfio-pci.ko";
        out.stdout.windows(needle.len()).any(|w| w == needle)
    }
}

/// `target/<profile>/fairgpu-guest`, the guest tool (crate guest-tools).
pub fn guest_tool() -> PathBuf {
    let p = crate::profile_dir().join("fairgpu-guest");
    assert!(
        p.is_file(),
        "{} not found: run `cargo build -p fairgpu-guest-tools` first",
        p.display()
    );
    p
}

/// Whether the image can give a guest the MSI-X wake path (it has the
/// vfio modules); if not, the test is skipped with a message, or fails
/// when [`REQUIRE_ENV`] is set.
pub fn image_has_vfio_or_skip(img: &Image) -> bool {
    if img.has_vfio() {
        return true;
    }
    let why = "the guest image has no vfio modules: rebuild it with scripts/guest-image.sh";
    assert!(std::env::var_os(REQUIRE_ENV).is_none(), "{why}");
    eprintln!("skipping: {why}");
    false
}

/// The guest image, or `None` (test skipped, with a message) when QEMU or
/// the image is missing and [`REQUIRE_ENV`] is unset; with it set, a
/// missing piece panics.
pub fn image() -> Option<Image> {
    let dir = std::env::var_os(IMAGE_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // target/<profile>/fairgpu → target/guest-image
            let target = fairgpu_bin()
                .parent()
                .and_then(Path::parent)
                .expect("target dir")
                .to_owned();
            target.join("guest-image")
        });
    let img = Image {
        vmlinuz: dir.join("vmlinuz"),
        initrd: dir.join("initrd.gz"),
    };
    let qemu = Command::new(QEMU)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let missing = if !qemu {
        Some(format!("{QEMU} not found"))
    } else if !img.vmlinuz.is_file() || !img.initrd.is_file() {
        Some(format!(
            "no guest image in {} (build it with scripts/guest-image.sh {} target/debug/fairgpu)",
            dir.display(),
            dir.display()
        ))
    } else {
        None
    };
    match missing {
        None => Some(img),
        Some(why) if std::env::var_os(REQUIRE_ENV).is_some() => {
            panic!("{why}, and {REQUIRE_ENV} is set")
        }
        Some(why) => {
            eprintln!("skipping: {why}");
            None
        }
    }
}

/// One file of an [`Overlay`].
#[derive(Debug, Clone)]
struct OverlayFile {
    /// Path in the guest, relative to `/`.
    path: String,
    /// Permission bits.
    mode: u32,
    data: Vec<u8>,
}

/// Files to add to the guest's initramfs, written as an uncompressed newc
/// archive after the base image. The kernel unpacks concatenated archives
/// in order, so these files replace the base's of the same path.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    files: Vec<OverlayFile>,
}

impl Overlay {
    /// An empty overlay.
    pub fn new() -> Overlay {
        Overlay::default()
    }

    /// Adds (or replaces) the file `guest_path` (absolute) with `data`.
    pub fn add(&mut self, guest_path: &str, mode: u32, data: Vec<u8>) -> &mut Overlay {
        let path = guest_path.trim_start_matches('/').to_owned();
        assert!(
            !path.is_empty() && !path.split('/').any(|c| c.is_empty() || c == ".."),
            "not a file path for the guest: {guest_path:?}"
        );
        self.files.retain(|f| f.path != path);
        self.files.push(OverlayFile { path, mode, data });
        self
    }

    /// Whether the overlay has a file at `guest_path`.
    pub fn contains(&self, guest_path: &str) -> bool {
        let path = guest_path.trim_start_matches('/');
        self.files.iter().any(|f| f.path == path)
    }

    /// Adds the host file `host` as `guest_path`, executable, without its
    /// debug information (which only slows the guest's boot).
    pub fn add_stripped(&mut self, guest_path: &str, host: &Path) -> &mut Overlay {
        let data = stripped(host);
        self.add(guest_path, 0o755, data)
    }

    /// Adds every shared library `ldd` finds for `binary` (with
    /// `LD_LIBRARY_PATH` set to `library_path`, if given): a library in a
    /// system directory at its host path, any other (a toolchain's
    /// libcudart, found through the binary's run path) into `private_dir`,
    /// which the guest must put on its `LD_LIBRARY_PATH`. Returns the
    /// libraries' guest paths. Panics if `ldd` cannot resolve one.
    pub fn add_libraries(
        &mut self,
        binary: &Path,
        library_path: Option<&Path>,
        private_dir: &str,
    ) -> Vec<String> {
        let mut cmd = Command::new("ldd");
        cmd.arg(binary);
        if let Some(p) = library_path {
            cmd.env("LD_LIBRARY_PATH", p);
        }
        let out = run_command(&mut cmd, Duration::from_secs(30));
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            // A static binary needs nothing.
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                text.contains("not a dynamic executable") || err.contains("not a dynamic"),
                "ldd {}: {}\n{text}{err}",
                binary.display(),
                out.status
            );
            return Vec::new();
        }
        let mut added = Vec::new();
        for line in text.lines() {
            let line = line.trim();
            let (name, host) = match line.split_once(" => ") {
                Some((name, rest)) => {
                    let host = rest.split(" (").next().unwrap_or(rest).trim();
                    assert!(
                        host.starts_with('/'),
                        "{}: ldd cannot find {name}: {line}",
                        binary.display()
                    );
                    (name.to_owned(), host.to_owned())
                }
                // The dynamic loader: "/lib64/ld-linux-x86-64.so.2 (0x...)".
                None if line.starts_with('/') => {
                    let host = line.split(" (").next().unwrap_or(line).to_owned();
                    (String::new(), host)
                }
                // linux-vdso.so.1 and the like.
                None => continue,
            };
            let guest = if name.is_empty() || SYSTEM_LIB_DIRS.iter().any(|d| host.starts_with(d)) {
                host.clone()
            } else {
                format!("{}/{name}", private_dir.trim_end_matches('/'))
            };
            if !self.contains(&guest) {
                let data = std::fs::read(&host)
                    .unwrap_or_else(|e| panic!("reading {host} for the guest: {e}"));
                self.add(&guest, 0o755, data);
            }
            added.push(guest);
        }
        added
    }

    /// Total bytes of file data.
    pub fn data_len(&self) -> usize {
        self.files.iter().map(|f| f.data.len()).sum()
    }

    /// Writes `base` followed by the overlay's archive (with every
    /// directory its files need) to `out`.
    pub fn write(&self, base: &Path, out: &Path) {
        let mut img = std::fs::read(base).expect("reading the base initramfs");
        // The kernel looks for the next archive at a 4-byte boundary.
        while !img.len().is_multiple_of(4) {
            img.push(0);
        }
        let mut dirs: Vec<&str> = Vec::new();
        for f in &self.files {
            let mut at = 0;
            while let Some(i) = f.path[at..].find('/') {
                let dir = &f.path[..at + i];
                if !dirs.contains(&dir) {
                    dirs.push(dir);
                }
                at += i + 1;
            }
        }
        // Parents first: "a" sorts before "a/b".
        dirs.sort_unstable();
        let mut ino = 0x4000_0000;
        for d in &dirs {
            ino += 1;
            newc_entry(&mut img, ino, d, 0o040_755, &[]);
        }
        for f in &self.files {
            ino += 1;
            newc_entry(&mut img, ino, &f.path, 0o100_000 | f.mode, &f.data);
        }
        newc_entry(&mut img, 0, "TRAILER!!!", 0, &[]);
        std::fs::write(out, img).expect("writing the test initramfs");
    }
}

/// `host`'s bytes without debug information (`objcopy --strip-debug`), or
/// as they are where objcopy is missing or fails.
fn stripped(host: &Path) -> Vec<u8> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let tmp = std::env::temp_dir().join(format!(
        "fairgpu-strip-{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        host.file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("binary")
    ));
    let ok = Command::new("objcopy")
        .arg("--strip-debug")
        .arg(host)
        .arg(&tmp)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let data = if ok { std::fs::read(&tmp).ok() } else { None };
    let _ = std::fs::remove_file(&tmp);
    data.unwrap_or_else(|| {
        std::fs::read(host).unwrap_or_else(|e| panic!("reading {}: {e}", host.display()))
    })
}

/// Appends one newc entry (root-owned) to `out`.
fn newc_entry(out: &mut Vec<u8>, ino: u32, name: &str, mode: u32, data: &[u8]) {
    let size = u32::try_from(data.len()).expect("an initramfs file under 4 GiB");
    let fields = [
        ino,
        mode,
        0,
        0,
        1,
        0,
        size,
        0,
        0,
        0,
        0,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
    out.extend_from_slice(data);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// How a [`Guest`] is started.
#[derive(Debug, Clone)]
pub struct GuestOptions {
    /// Guest memory, MiB.
    pub memory_mib: u32,
    /// Virtual CPUs.
    pub cpus: u32,
}

impl Default for GuestOptions {
    fn default() -> GuestOptions {
        GuestOptions {
            memory_mib: 512,
            cpus: 2,
        }
    }
}

/// The kernel command line every guest gets; [`Machine::kernel_args`]
/// follow it.
const KERNEL_ARGS: &str = "console=ttyS0 quiet panic=-1";

/// The machine QEMU emulates for a [`Guest`] and what the guest's kernel
/// needs for it: QEMU's default machine and the plain command line unless
/// set.
#[derive(Debug, Clone, Default)]
pub struct Machine {
    /// `-machine` value (such as `q35`); QEMU's default when `None`.
    pub machine: Option<String>,
    /// QEMU options placed before the fairgpu device's: a device that must
    /// exist before the devices it serves (an IOMMU) goes here.
    pub devices: Vec<String>,
    /// Kernel command-line arguments after the console ones.
    pub kernel_args: Vec<String>,
}

impl Machine {
    /// q35 with an emulated Intel IOMMU (interrupt remapping on) and the
    /// kernel told to use it: the guest's vfio-pci can then take the
    /// ivshmem device and receive its MSI-X vectors.
    pub fn q35_with_iommu() -> Machine {
        Machine {
            machine: Some("q35".into()),
            devices: ["-device", "intel-iommu,intremap=on"]
                .map(String::from)
                .to_vec(),
            kernel_args: vec!["intel_iommu=on".into()],
        }
    }

    /// The kernel command line.
    fn append(&self) -> String {
        let mut line = KERNEL_ARGS.to_owned();
        for a in &self.kernel_args {
            line.push(' ');
            line.push_str(a);
        }
        line
    }
}

/// A booting guest: QEMU (TCG) with its serial console collected.
#[derive(Debug)]
pub struct Guest {
    name: String,
    child: Child,
    output: Arc<Mutex<String>>,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
    /// QEMU's arguments, to boot again a guest whose kernel never reached
    /// its init (see [`BOOT_SILENCE`]).
    args: Vec<std::ffi::OsString>,
    rebooted: bool,
}

/// The first line the guest's init prints.
const GUEST_UP: &str = "fairgpu-guest: up after";

/// How long a guest's kernel may take to reach its init (it does in about
/// 4 s here, 20 s on a loaded host). Past that without a word from the
/// init, QEMU's TCG boot has hung before any fairgpu code ran in the
/// guest; [`Guest::finish`] boots it once more instead of failing the
/// test on it.
const BOOT_SILENCE: Duration = Duration::from_secs(60);

/// What a guest printed and how it ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// The guest's name.
    pub name: String,
    /// QEMU's exit status.
    pub status: ExitStatus,
    /// The serial console and QEMU's own messages, `\r` removed.
    pub output: String,
    /// From boot to QEMU's exit.
    pub took: Duration,
}

impl Finished {
    /// Panics (showing the output) unless QEMU exited cleanly and the
    /// guest's `/guest/run` exited with 0.
    pub fn assert_run_succeeded(&self) {
        assert!(
            self.status.success(),
            "qemu for {} exited with {}; output:\n{}",
            self.name,
            self.status,
            self.output
        );
        assert!(
            self.output.lines().any(|l| l == RUN_SUCCEEDED),
            "guest {}'s run script failed; output:\n{}",
            self.name,
            self.output
        );
    }
}

impl Guest {
    /// Boots the image's kernel with `initrd` (an [`Overlay`] written over
    /// the base image) and the extra QEMU arguments `device_args` (the
    /// fairgpu device's) on QEMU's default machine.
    pub fn boot(
        name: &str,
        img: &Image,
        initrd: &Path,
        device_args: &[String],
        opts: &GuestOptions,
    ) -> Guest {
        Guest::boot_on(name, img, initrd, &Machine::default(), device_args, opts)
    }

    /// [`Guest::boot`] on `machine`, whose devices come before
    /// `device_args` and whose kernel arguments follow the console's.
    pub fn boot_on(
        name: &str,
        img: &Image,
        initrd: &Path,
        machine: &Machine,
        device_args: &[String],
        opts: &GuestOptions,
    ) -> Guest {
        let mut args: Vec<std::ffi::OsString> = Vec::new();
        let mut push = |a: &[&str]| args.extend(a.iter().map(Into::into));
        push(&["-accel", "tcg"]);
        if let Some(m) = &machine.machine {
            push(&["-machine", m]);
        }
        push(&["-m", &opts.memory_mib.to_string()]);
        push(&["-smp", &opts.cpus.to_string()]);
        push(&["-nodefaults", "-no-reboot", "-display", "none"]);
        push(&["-serial", "stdio"]);
        args.push("-kernel".into());
        args.push(img.vmlinuz.clone().into());
        args.push("-initrd".into());
        args.push(initrd.into());
        args.push("-append".into());
        args.push(machine.append().into());
        args.extend(machine.devices.iter().map(Into::into));
        args.extend(device_args.iter().map(Into::into));
        let (child, output, readers) = spawn(&args);
        Guest {
            name: name.to_owned(),
            child,
            output,
            readers,
            started: Instant::now(),
            args,
            rebooted: false,
        }
    }

    /// The guest's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What the guest printed so far.
    pub fn output(&self) -> String {
        self.output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Waits for QEMU to exit (the guest powers off); kills it and fails
    /// the test, showing the output so far, when `timeout` has passed since
    /// the boot.
    pub fn finish(mut self, timeout: Duration) -> Finished {
        let status = loop {
            if let Some(s) = self.child.try_wait().expect("waiting for qemu") {
                break s;
            }
            if !self.rebooted
                && self.started.elapsed() > BOOT_SILENCE.min(timeout)
                && !self.output().contains(GUEST_UP)
            {
                eprintln!(
                    "guest {}: its kernel did not reach init within {:?} (output: {:?}); booting it again",
                    self.name,
                    self.started.elapsed(),
                    self.output()
                );
                let _ = self.child.kill();
                let _ = self.child.wait();
                for r in self.readers.drain(..) {
                    let _ = r.join();
                }
                (self.child, self.output, self.readers) = spawn(&self.args);
                self.started = Instant::now();
                self.rebooted = true;
                continue;
            }
            if self.started.elapsed() > timeout {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "guest {} still running after {timeout:?}; output so far:\n{}",
                    self.name,
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let took = self.started.elapsed();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        Finished {
            name: self.name.clone(),
            status,
            output: self.output(),
            took,
        }
    }
}

/// Starts QEMU with `args`, collecting its console and messages.
fn spawn(args: &[std::ffi::OsString]) -> (Child, Arc<Mutex<String>>, Vec<JoinHandle<()>>) {
    let mut child = Command::new(QEMU)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning qemu");
    let output = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    let pipes: [Box<dyn Read + Send>; 2] = [
        Box::new(child.stdout.take().expect("piped stdout")),
        Box::new(child.stderr.take().expect("piped stderr")),
    ];
    for pipe in pipes {
        let out = output.clone();
        readers.push(std::thread::spawn(move || {
            // The console may carry bytes that are not UTF-8.
            let mut r = BufReader::new(pipe);
            let mut line = Vec::new();
            while matches!(r.read_until(b'\n', &mut line), Ok(n) if n > 0) {
                let text = String::from_utf8_lossy(&line);
                let mut o = out.lock().unwrap_or_else(|e| e.into_inner());
                o.push_str(text.trim_end_matches(['\r', '\n']));
                o.push('\n');
                line.clear();
            }
        }));
    }
    (child, output, readers)
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
