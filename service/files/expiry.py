"""Files past their ``expires_at`` (``expires_after`` at upload) are deleted.

The API already treats an expired file as gone (``service.files.file_records.live``); this sweep,
run from the dispatcher's batch maintenance tick, frees the rows and the bytes. A file that
is the input of a batch still validating is kept until validation is done (its lines are
copied into jobs then), so an expiry can never break a batch mid-ingest. Batches keep their
history: their file references are ``ON DELETE SET NULL``.
"""

from __future__ import annotations

import datetime as dt
import logging

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from service.files.storage import FileStorage
from service.store.models.batches import Batch, BatchStatus
from service.store.models.files import StoredFile

log = logging.getLogger("fairway.files")


def expire_files(session: Session, storage: FileStorage, *, now: dt.datetime,
                 limit: int = 500) -> int:
    """Delete up to ``limit`` expired files (rows first, then bytes); returns how many."""
    in_validation = exists().where(Batch.input_file_id == StoredFile.id,
                                   Batch.status == BatchStatus.VALIDATING)
    rows = session.execute(
        select(StoredFile.id, StoredFile.storage_key)
        .where(StoredFile.expires_at <= now, ~in_validation)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    if not rows:
        return 0
    session.execute(delete(StoredFile).where(StoredFile.id.in_([r.id for r in rows])))
    session.commit()
    # Rows first: once they are gone nobody can ask for the bytes, so a crash in between
    # only leaves orphan objects, never a row pointing at nothing.
    for row in rows:
        try:
            storage.delete(row.storage_key)
        except OSError:
            log.warning("could not delete the bytes of expired file %s", row.id)
    log.info("deleted %d expired file(s)", len(rows))
    return len(rows)
