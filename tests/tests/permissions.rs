//! Who can open what (docs/threat-model.md, "Permissions"): the daemon's
//! own files are its user's alone, each VM's region is open to whom its
//! `[[vm]]` table says (by default the daemon's user alone), and the
//! default control-socket directory is used only if it is ours and no one
//! else can write it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fairgpu_tests::{fairgpu_bin, run_command, status, Setup, TempDir};

/// How long a `fairgpu` command may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(30);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// The attack: every region and every file of the daemon's had mode 0660
/// and the daemon's group, so any member of it (QEMU's user, a local
/// guest given access to its own region) could open another VM's region,
/// push SimGpu's `busy_until` ahead (another VM's synchronize then hangs),
/// or write the grant and stats files. Now the daemon's files are 0600 and
/// a region without `group` or `mode` is the daemon's user's alone.
#[test]
fn a_vm_group_member_cannot_open_another_vms_region_or_the_daemons_files() {
    let setup = Setup::new("perm_default", &[("one", 1, 1), ("two", 1, 1)]);
    let d = setup.start();
    let s = status(&d);
    for r in &setup.regions {
        assert_eq!(mode(r), 0o600, "region socket {}", r.display());
    }
    let sim_device = s.daemon.sim_device.clone().expect("a SimGpu device file");
    assert_eq!(mode(&sim_device), 0o600, "SimGpu device file");
    assert_eq!(mode(&s.daemon.stats_file), 0o600, "stats file");
    let mut internal = 0;
    for e in std::fs::read_dir(setup.dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().is_some_and(|n| n != "fairgpu.toml") {
            assert_eq!(mode(&p) & 0o077, 0, "{} is open to others", p.display());
            internal += 1;
        }
    }
    // The grant file, the stats file, the SimGpu device file and the
    // control socket.
    assert!(internal >= 4, "only {internal} files in the state dir");
}

/// A VM's `group` and `mode` give its region socket to that group, and
/// only that VM's.
#[test]
fn a_vms_group_and_mode_apply_to_its_region_only() {
    let setup = Setup::new("perm_group", &[("shared", 1, 1), ("private", 1, 1)]);
    // SAFETY: getegid has no preconditions.
    let gid = unsafe { libc::getegid() };
    let config = std::fs::read_to_string(&setup.config).unwrap().replacen(
        "name = \"shared\"\n",
        &format!("name = \"shared\"\ngroup = \"{gid}\"\nmode = \"0660\"\n"),
        1,
    );
    std::fs::write(&setup.config, config).unwrap();
    let _d = setup.start();
    let shared = std::fs::symlink_metadata(&setup.regions[0]).unwrap();
    assert_eq!(shared.permissions().mode() & 0o7777, 0o660);
    assert_eq!(shared.gid(), gid);
    assert_eq!(mode(&setup.regions[1]), 0o600);
}

/// A fake daemon: answers every request with `{"ok":true}`.
fn fake_daemon(socket: &Path) -> std::thread::JoinHandle<()> {
    use std::io::{BufRead, BufReader, Write};
    let listener = UnixListener::bind(socket).expect("binding the fake socket");
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut line = String::new();
            if BufReader::new(&conn).read_line(&mut line).is_ok() {
                let _ = conn.write_all(b"{\"ok\":true}\n");
            }
        }
    })
}

fn set_weight_with_runtime_dir(runtime: &Path) -> std::process::Output {
    run_command(
        Command::new(fairgpu_bin())
            .args(["set-weight", "vm1", "3"])
            .env("XDG_RUNTIME_DIR", runtime),
        CLI_TIMEOUT,
    )
}

/// The attack: another user creates the default control-socket directory
/// before the daemon does, world-writable, and swaps in a socket of their
/// own; `fairgpu set-weight` reported success to the fake. Now the
/// client refuses the directory, naming it and why.
#[test]
fn set_weight_refuses_a_fake_daemon_in_a_world_writable_default_socket_dir() {
    let runtime = TempDir::new("perm_fake_ww");
    let dir = runtime.join("fairgpu");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let _fake = fake_daemon(&dir.join("control.sock"));
    assert_set_weight_refused(runtime.path(), &dir, "writable");
}

/// Runs `set-weight` with the default socket directory under `runtime`
/// and checks that it refused, naming `dir` and `why`.
fn assert_set_weight_refused(runtime: &Path, dir: &Path, why: &str) {
    let out = set_weight_with_runtime_dir(runtime);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "set-weight believed a fake daemon: {}",
        text(&out.stdout)
    );
    assert!(
        err.contains(&dir.display().to_string()) && err.contains(why),
        "{err}"
    );
}

/// The same attack through a symlink: the default directory is a link to
/// a directory the attacker controls.
#[test]
fn set_weight_refuses_a_fake_daemon_behind_a_symlinked_default_socket_dir() {
    let runtime = TempDir::new("perm_fake_link");
    let elsewhere = runtime.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o700)).unwrap();
    let dir = runtime.join("fairgpu");
    std::os::unix::fs::symlink(&elsewhere, &dir).unwrap();
    let _fake = fake_daemon(&elsewhere.join("control.sock"));
    assert_set_weight_refused(runtime.path(), &dir, "symlink");
}

/// The daemon refuses to serve from a default directory that someone else
/// could have prepared (here: one anyone may write), naming it and why,
/// instead of listening where a fake could replace it.
#[test]
fn serve_refuses_a_world_writable_default_socket_dir() {
    let runtime = TempDir::new("perm_serve_ww");
    let dir = runtime.join("fairgpu");
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let config = runtime.join("fairgpu.toml");
    let region = fairgpu_tests::unique_region_path("perm_serve_ww");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nexecutor = \"sim\"\nstate_dir = {:?}\n\
             [[vm]]\nname = \"vm1\"\nmemory = \"1GiB\"\nregion = {:?}\n",
            runtime.path().display().to_string(),
            region.display().to_string()
        ),
    )
    .unwrap();
    let out = run_command(
        Command::new(fairgpu_bin())
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .env("XDG_RUNTIME_DIR", runtime.path()),
        Duration::from_secs(10),
    );
    let err = text(&out.stderr);
    assert!(!out.status.success(), "serve started: {err}");
    assert!(
        err.contains(&dir.display().to_string()) && err.contains("writable"),
        "{err}"
    );
    assert!(!dir.join("control.sock").exists());
    assert!(!region.exists());
}
