"""The table sink's decision log and staged files under drivers that fell behind
(presumed dead, then resumed) and under lost answers: a decided batch is never destroyed,
and a driver's own write is never taken for another driver's."""

from __future__ import annotations

from kafka_eos_ds.errors import StorageError
from kafka_eos_ds.filesink.decision_log import FileDecisionLog
from kafka_eos_ds.filesink.layout import FileId, Layout, writer_dir
from kafka_eos_ds.filesink.participants import FileParticipants
from kafka_eos_ds.storage.local import LocalStore
from kafka_eos_ds.twophase import DECIDED, DONE, Decision, DoneMark, Kind, Participant, TwoPhaseCommitter, WriteId

W = writer_dir("q:query")
QUERY = WriteId(Kind.STREAM, "query", -1)


def _stage(layout: Layout, fid: FileId, stamp: str = "5ea1ed00") -> Participant:
    layout.ensure(fid.writer)
    layout.pending(fid, stamp).write_bytes(b"rows")
    return Participant(str(fid), fid.partition, fid.attempt, 1,
                       {"pending": layout.relative(layout.pending(fid, stamp)),
                        "final": layout.relative(layout.final(fid))})


class AnswerLostOnce(LocalStore):
    """A store whose first create-if-absent takes effect and then fails retriably (an S3
    PutObject or HDFS rename whose answer was lost)."""

    def __init__(self) -> None:
        self.lost = 0

    def put(self, path: str, data: bytes, *, new: bool = False) -> None:
        super().put(path, data, new=new)
        if new and self.lost == 0:
            self.lost += 1
            raise StorageError(f"connection reset after putting {path}", retriable=True)


def test_a_decision_write_whose_answer_was_lost_is_retried_as_written(tmp_path):
    layout = Layout(tmp_path)
    decided = _stage(layout, FileId(W, "q", 2, 0, 0))
    FileDecisionLog(layout).write("q:query", Decision("query", 2, DECIDED, (decided,)))
    store = AnswerLostOnce()
    committer = TwoPhaseCommitter(FileDecisionLog(layout, store), FileParticipants(layout, store),
                                  streams_share_ids=False, sleep=lambda _s: None)
    # Recovery finishes batch 2; recording it done loses its first answer, and the retry
    # finds its own record there.
    assert committer.recover(QUERY) == DoneMark("query", 2)
    assert store.lost == 1
    assert FileDecisionLog(layout).latest("q:query").state == DONE
    assert (tmp_path / "part-00002-00000-q.parquet").read_bytes() == b"rows"
