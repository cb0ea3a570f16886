"""When each model was first offered here: the ``created`` time of ``/v1/models``."""

from __future__ import annotations

import datetime as dt

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from service.store.db import Base, utcnow_column


class ServedModel(Base):
    """One row per model name, written once (insert-if-absent) by the API the first time it
    lists the model as available: configured, or served by a live worker."""

    __tablename__ = "served_models"

    name: Mapped[str] = mapped_column(String(256), primary_key=True)
    first_served_at: Mapped[dt.datetime] = utcnow_column()
