//! The tmpfs fixture mounts a real file system of the size asked, and unmounts it when
//! dropped.

use std::fs;
use std::io::Write;

use mongoose_testkit::Tmpfs;

#[test]
fn a_tmpfs_fills_up_at_its_size_and_is_unmounted_when_dropped() {
    let tmpfs = Tmpfs::mount("64k");
    let point = tmpfs.path().to_path_buf();
    let mut file = fs::File::create(point.join("fill")).expect("create");
    let error = (0..100)
        .find_map(|_| file.write_all(&[0; 4096]).err())
        .expect("64 KiB fill up before 400 KiB are written");
    assert_eq!(error.raw_os_error(), Some(28), "ENOSPC: {error}");
    drop(file);
    tmpfs.remount("size=1m");
    fs::write(point.join("more"), [0; 4096]).expect("room again after a resize");
    drop(tmpfs);
    let mounts = fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    assert!(
        !mounts.contains(point.to_str().expect("UTF-8")),
        "still mounted: {mounts}"
    );
}
