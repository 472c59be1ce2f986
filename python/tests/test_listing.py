"""List-objects paging and filtering against a real cluster."""

import pytest


@pytest.fixture
def filled(bucket):
    names = [f"obj-{i:03d}" for i in range(40)] + [f"dir/sub-{i:02d}" for i in range(10)]
    for n in names:
        bucket.object(n).put(n.encode())
    return bucket, sorted(names)


def test_paging_each_once_in_order(filled):
    bucket, names = filled
    seen, token, uuid, pages = [], "", "", 0
    while True:
        page = bucket.list_objects(page_size=7, continuation_token=token, uuid=uuid)
        pages += 1
        assert len(page.entries) <= 7
        assert page.uuid
        assert page.entries or not page.continuation_token
        seen += [e.name for e in page.entries]
        if not page.continuation_token:
            break
        token, uuid = page.continuation_token, page.uuid
        assert pages < 100
    assert seen == names
    assert pages in (8, 9)  # 50 names / 7 per page
    assert [e.name for e in bucket.list_objects_iter(page_size=7)] == names
    assert [e.name for e in bucket.list_all_objects(page_size=7)] == names
    assert [e.name for e in bucket.list_all_objects()] == names


@pytest.mark.parametrize("page_size", [1, 3, 49, 50, 51, 1000])
def test_page_sizes(filled, page_size):
    bucket, names = filled
    assert [e.name for e in bucket.list_all_objects(page_size=page_size)] == names


def test_prefix(filled):
    bucket, names = filled
    assert [e.name for e in bucket.list_all_objects(prefix="dir/", page_size=3)] == [n for n in names if n.startswith("dir/")]
    assert [e.name for e in bucket.list_all_objects(prefix="obj-01")] == [f"obj-01{i}" for i in range(10)]
    assert bucket.list_all_objects(prefix="nothing-here") == []


def test_props(filled):
    bucket, names = filled
    smap = bucket.client.cluster_map()
    plain = bucket.list_all_objects(prefix="obj-000")
    assert plain[0].name == "obj-000" and plain[0].size == 7
    e = bucket.list_all_objects(prefix="obj-000", props="name,size,checksum,atime,version,location")[0]
    assert e.size == 7 and len(e.checksum) == 16 and e.atime and e.version
    assert e.location.startswith("t[") and e.location[2:e.location.index("]")] in smap["tmap"]
    a = bucket.list_all_objects(prefix="obj-000", props="all")[0]
    assert a.checksum == e.checksum and a.location == e.location
    assert a.flags & 64  # present ("cached")


def test_empty_bucket(bucket):
    page = bucket.list_objects()
    assert page.entries == [] and page.continuation_token == ""
    assert bucket.list_all_objects(page_size=5) == []
