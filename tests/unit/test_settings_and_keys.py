import pytest
from pydantic import ValidationError

from service.store.settings import Settings, to_sqlalchemy_url
from service.tenants.keys import display_prefix, generate_key, hash_key


def test_default_secrets_refused_outside_development():
    with pytest.raises(ValidationError, match="SECRET_KEY"):
        Settings(environment="production")
    with pytest.raises(ValidationError, match="ADMIN_TOKEN"):
        Settings(environment="production", secret_key="s3cret-value")
    ok = Settings(environment="production", secret_key="a", admin_token="b")
    assert ok.environment == "production"


def test_default_secrets_allowed_in_development():
    assert Settings(environment="development").secret_key


def test_plain_postgres_url_gets_psycopg_driver():
    assert to_sqlalchemy_url("postgresql://u@h/db") == "postgresql+psycopg://u@h/db"
    assert to_sqlalchemy_url("postgresql+psycopg://u@h/db") == "postgresql+psycopg://u@h/db"


def test_keys_are_random_and_hash_is_keyed():
    a, b = generate_key(), generate_key()
    assert a != b and a.startswith("fw-") and len(a) > 40
    assert hash_key(a, "s1") != hash_key(a, "s2")
    assert hash_key(a, "s1") == hash_key(a, "s1")
    assert a not in hash_key(a, "s1")
    assert display_prefix(a) == a[:11]
