//! A VM whose guests run in QEMU (`guest = "qemu"`): the daemon sizes its
//! region for a PCI BAR and leaves dead-owner reclamation to the guest, and
//! `fairgpu qemu-args` / `libvirt-xml` describe the device for it.

use std::process::Command;
use std::time::Duration;

use fairgpu_frontend::GuestRegion;
use fairgpu_protocol::layout::FEATURE_LOCAL_OWNERS;
use fairgpu_tests::{fairgpu_bin, run_command, unique_region_path, DaemonProcess, TempDir};

#[test]
fn qemu_guests_get_a_bar_sized_region_and_the_device_options_to_match() {
    let dir = TempDir::new("qemu_config");
    let socket = dir.join("control.sock");
    let vm_region = unique_region_path("qemu_config-vm");
    let local_region = unique_region_path("qemu_config-local");
    let config = dir.join("fairgpu.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\ncontrol_socket = {:?}\nexecutor = \"sim\"\nstate_dir = {:?}\n\n\
             [[vm]]\nname = \"vm1\"\nmemory = \"64MiB\"\nregion = {:?}\nchannels = 2\nguest = \"qemu\"\n\n\
             [[vm]]\nname = \"local1\"\nmemory = \"64MiB\"\nregion = {:?}\nchannels = 2\n",
            socket.display().to_string(),
            dir.path().display().to_string(),
            vm_region.display().to_string(),
            local_region.display().to_string()
        ),
    )
    .unwrap();
    let _daemon =
        DaemonProcess::start(&config, &socket, &[vm_region.clone(), local_region.clone()]);

    let size = std::fs::metadata(&vm_region).unwrap().len();
    assert!(
        size.is_power_of_two(),
        "a QEMU guest's region is {size} bytes, not a BAR size"
    );
    let vm = GuestRegion::open(&vm_region).unwrap();
    assert_eq!(
        vm.layout().features() & FEATURE_LOCAL_OWNERS,
        0,
        "host must not judge guest pids"
    );
    assert!((vm.layout().region_size() as u64) <= size);
    let local = GuestRegion::open(&local_region).unwrap();
    assert_ne!(local.layout().features() & FEATURE_LOCAL_OWNERS, 0);

    let cli = |args: &[&str]| {
        let out = run_command(
            Command::new(fairgpu_bin())
                .args(args)
                .arg("--config")
                .arg(&config),
            Duration::from_secs(30),
        );
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, args, _) = cli(&["qemu-args", "vm1"]);
    assert!(ok);
    assert!(
        args.contains(&format!("mem-path={},size={size}", vm_region.display())),
        "{args}"
    );
    assert!(args.contains("-device ivshmem-plain,memdev="), "{args}");
    let (ok, xml, _) = cli(&["libvirt-xml", "vm1"]);
    assert!(ok);
    assert!(
        xml.contains("<model type='ivshmem-plain'/>")
            && xml.contains(&format!("<size unit='M'>{}</size>", size >> 20)),
        "{xml}"
    );
    let (ok, _, err) = cli(&["qemu-args", "local1"]);
    assert!(!ok && err.contains("guest = \"qemu\""), "{err}");
}
