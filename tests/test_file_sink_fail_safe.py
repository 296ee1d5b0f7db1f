"""The file sink's stores and metastore fail safe: a crash inside a move, a transient
failure while preparing, a store that ignores conditional writes, a partition the
metastore refuses."""

from __future__ import annotations

import os

from kafka_eos_ds.filesink.layout import FileId, Layout, writer_dir
from kafka_eos_ds.filesink.participants import FileParticipants
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.twophase import Outcome, Participant

W = writer_dir("q:query")


def _staged(layout: Layout, batch: int = 1) -> Participant:
    fid = FileId(W, "q", batch, 0, 0)
    layout.ensure(fid.writer)
    pending = layout.pending(fid, "5ea1ed00")
    pending.write_bytes(b"rows")
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       {"pending": layout.relative(pending), "final": layout.relative(layout.final(fid))})


# -- a crash between the link and the unlink of a local move ----------------------

def test_a_commit_interrupted_between_link_and_unlink_is_finished_by_the_recommit(tmp_path):
    """The local move is a link then an unlink: a crash between them leaves the pending
    and the final name on one file. The re-commit finishes the move."""
    layout = Layout(tmp_path)
    p = _staged(layout)
    pending, final = layout.resolve(p.handle["pending"]), layout.resolve(p.handle["final"])
    os.link(pending, final)  # the crash struck here
    assert FileParticipants(layout).commit(p) is Outcome.COMMITTED
    assert final.read_bytes() == b"rows" and not pending.exists()


def test_an_interrupted_local_move_is_finished_and_a_taken_name_still_refused(tmp_path):
    src, dst, other = tmp_path / "in-progress" / "a", tmp_path / "pending" / "a", tmp_path / "b"
    src.parent.mkdir()
    src.write_bytes(b"rows")
    dst.parent.mkdir()
    os.link(src, dst)
    LocalStore().rename(str(src), str(dst))
    assert dst.read_bytes() == b"rows" and not src.exists()
    other.write_bytes(b"other")
    try:
        LocalStore().rename(str(dst), str(other))
    except FileExistsError:
        pass
    else:
        raise AssertionError("a move over another file must be refused")
    assert other.read_bytes() == b"other" and dst.exists()

