//! Tests of the segment copy.

use super::*;

fn values(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Vec<u8>, u32)> {
    range
        .map(|s| {
            let e = tinycode_shared::proto::Event {
                sequence: s,
                stream_id: "s".into(),
                stream_version: s,
                ..Default::default()
            };
            let (v, crc) = super::super::keys::encode_event(&e);
            (s, v, crc)
        })
        .collect()
}

fn append(log: &mut SegmentLog, rows: &[(u64, Vec<u8>, u32)]) -> Head {
    let rows: Vec<(u64, &[u8], u32)> = rows
        .iter()
        .map(|(s, v, c)| (*s, v.as_slice(), *c))
        .collect();
    log.append(&rows).unwrap()
}

#[test]
fn records_carry_the_head_and_a_torn_tail_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, none) = SegmentLog::open(dir.path()).unwrap();
    assert!(none.is_none());
    let rows = values(1..=10);
    append(&mut log, &rows[..4]);
    let head = append(&mut log, &rows[4..]);
    assert_eq!(head.sequence, 10);
    let (_, reopened) = SegmentLog::open(dir.path()).unwrap();
    assert_eq!(reopened, Some(head));
    // A crash mid-record: a torn tail.
    let (_, path) = list(&dir_of(dir.path())).unwrap().pop().unwrap();
    let whole = std::fs::metadata(&path).unwrap().len();
    let mut log = SegmentLog::open(dir.path()).unwrap().0;
    let more = values(11..=12);
    append(&mut log, &more);
    let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    f.set_len(whole + 20).unwrap();
    let (_, after) = SegmentLog::open(dir.path()).unwrap();
    assert_eq!(after, Some(head), "the torn record is not the head");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole, "cut off");
    // Every event reads back, in order.
    let mut seen = Vec::new();
    let (end, stopped) = for_each(dir.path(), 3, |s, _| {
        seen.push(s);
        Ok(())
    })
    .unwrap();
    assert_eq!((end, stopped), (head, None));
    assert_eq!(seen, (3..=10).collect::<Vec<_>>());
    assert!(verify(dir.path()).unwrap().1.is_empty());
}

#[test]
fn a_damaged_sealed_record_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, _) = SegmentLog::open(dir.path()).unwrap();
    append(&mut log, &values(1..=5));
    append(&mut log, &values(6..=9));
    let (_, path) = list(&dir_of(dir.path())).unwrap().pop().unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[HEADER + 10] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();
    let (head, problems) = verify(dir.path()).unwrap();
    assert_eq!(
        head.sequence, 9,
        "the head is still the last whole record's"
    );
    assert!(
        problems.iter().any(|p| p.contains("damaged")),
        "{problems:?}"
    );
    // Damage is not a torn tail: opening keeps every whole record.
    let len = std::fs::metadata(&path).unwrap().len();
    assert_eq!(
        SegmentLog::open(dir.path()).unwrap().1.map(|h| h.sequence),
        Some(9)
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), len);
}

#[test]
fn rebuild_replaces_the_segments_whole_and_keeps_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let mut rows = values(1..=5);
    rows.extend(values(9..=10));
    let head = rebuild(dir.path(), rows.clone().into_iter().map(Ok)).unwrap();
    assert_eq!(head.sequence, 10);
    let expected = rows
        .iter()
        .fold(Head::default(), |h, (s, _, c)| h.then(*s, *c));
    assert_eq!(head, expected);
    assert_eq!(SegmentLog::open(dir.path()).unwrap().1, Some(head));
    let mut seen = Vec::new();
    for_each(dir.path(), 1, |s, _| {
        seen.push(s);
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, vec![1, 2, 3, 4, 5, 9, 10]);
}
