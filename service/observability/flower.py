"""The Celery app for Celery's own command line tools (Flower, ``celery inspect``):

    celery -A service.observability.flower flower --port=5555

Workers build their app with ``service.store.task_queue.make_celery(settings)``; Celery's ``-A``
needs a module attribute instead, so this module builds one from the FAIRWAY_* environment
when it is imported (creating the app opens no connection). Task events are on in every
worker (worker_send_task_events), so Flower shows tasks as they run.
"""

from __future__ import annotations

from service.store.settings import get_settings
from service.store.task_queue import make_celery

app = make_celery(get_settings())
