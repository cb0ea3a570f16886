from sqlalchemy import create_engine, inspect

from service.store.migrate import downgrade, upgrade
from service.store.settings import to_sqlalchemy_url
from tests.support.services import create_empty_database, drop_database


def _tables(url: str) -> set[str]:
    engine = create_engine(to_sqlalchemy_url(url))
    try:
        return set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_upgrade_downgrade_upgrade():
    url = create_empty_database()
    try:
        upgrade(url)
        assert {"tenants", "api_keys", "jobs", "alembic_version"} <= _tables(url)
        downgrade(url, "base")
        assert _tables(url) == {"alembic_version"}
        upgrade(url)
        assert {"tenants", "api_keys", "jobs"} <= _tables(url)
    finally:
        drop_database(url)
