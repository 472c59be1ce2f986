use super::frame::read_frame;
use super::locate::slice;
use super::*;

#[test]
fn item_names_and_ranges() {
    let b = Bck::from_request("b", None, None).unwrap();
    let mut it = Item::object(&b, "dir/o.jpg");
    assert_eq!(entry_name(&it, false), "b/dir/o.jpg");
    it.archpath = "x/y".into();
    assert_eq!(entry_name(&it, true), "dir/o.jpg/x/y");
    it.start = 2;
    it.length = 3;
    assert_eq!(slice(&it, 10).unwrap(), (2, 3));
    it.length = -1;
    assert_eq!(slice(&it, 10).unwrap(), (2, 8));
    it.length = 9;
    assert!(slice(&it, 10).is_err());
    let (bck, name) = parse_uname("ais/@#/b/x/y.tar").unwrap();
    assert_eq!((bck.name.as_str(), name.as_str()), ("b", "x/y.tar"));
    assert!(parse_uname("ais/b").is_err());
}

#[test]
fn frames_roundtrip() {
    let mut buf = Vec::new();
    let f = Frame {
        i: 3,
        size: 7,
        err: String::new(),
        status: 0,
    };
    write_frame(&mut buf, &serde_json::to_vec(&f).unwrap()).unwrap();
    let back: Frame = read_frame(&mut &buf[..]).unwrap();
    assert_eq!((back.i, back.size), (3, 7));
    let e = frame_error(&ApiError::not_found("gone"), 9);
    let back = Frame::read(&mut &e.encode()[..]).unwrap();
    assert_eq!((back.i, back.status, back.err.as_str()), (9, 404, "gone"));
}
