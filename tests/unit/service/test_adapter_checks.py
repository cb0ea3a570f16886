"""An uploaded adapter's checks, without services: its ft: name, its archive, its config and
its weights' header."""

from __future__ import annotations

import io
import json
import tarfile
import zipfile
from pathlib import Path

import pytest

from service.adapters.archive import extract_adapter
from service.adapters.validation import InvalidAdapter, check_config, check_weights
from service.store.adapter_names import ft_name, parse_ft_name, tenant_slug
from tests.support.lora_adapter import adapter_config, adapter_zip, synthetic_weights


def test_ft_names_round_trip_and_refuse_malformed_ones() -> None:
    name = ft_name("SmolLM2-135M-Instruct", "Acme Corp", "support-v2")
    assert name == "ft:SmolLM2-135M-Instruct:acme-corp:support-v2"
    parsed = parse_ft_name(name)
    assert parsed is not None
    assert (parsed.base_model, parsed.tenant_slug, parsed.adapter) == (
        "SmolLM2-135M-Instruct", "acme-corp", "support-v2")
    # A base model may hold ':' itself; the last two fields never do.
    with_colon = parse_ft_name("ft:org/model:v1:acme:a")
    assert with_colon is not None and with_colon.base_model == "org/model:v1"
    for bad in ("SmolLM2-135M-Instruct", "ft:", "ft:base:acme", "ft:base::name",
                "ft:base:acme:Upper", "ft:base:acme:-dash", "ft:base:acme:name\n"):
        assert parse_ft_name(bad) is None, bad
    assert tenant_slug("!!!") == "tenant"


def test_config_checks() -> None:
    info = check_config(json.dumps(adapter_config(rank=8)).encode(), max_rank=16)
    assert (info.rank, info.target_modules) == (8, ("q_proj", "v_proj"))
    refusals = {
        "rank 32 exceeds": adapter_config(rank=32),
        "peft_type": {**adapter_config(), "peft_type": "IA3"},
        "Unsupported target_modules": adapter_config(modules=("q_proj", "lm_head")),
        "non-empty list": {**adapter_config(), "target_modules": "q_proj|v_proj"},
        "DoRA": adapter_config(use_dora=True),
        "modules_to_save": adapter_config(modules_to_save=["lm_head"]),
        "positive integer": {**adapter_config(), "r": True},
    }
    for expected, config in refusals.items():
        with pytest.raises(InvalidAdapter, match=expected):
            check_config(json.dumps(config).encode(), max_rank=16)
    with pytest.raises(InvalidAdapter, match="not JSON"):
        check_config(b"\xff{", max_rank=16)


def test_weights_header_checks(tmp_path: Path) -> None:
    info = check_config(json.dumps(adapter_config(rank=8)).encode(), max_rank=16)
    good = tmp_path / "good.safetensors"
    good.write_bytes(synthetic_weights(rank=8))
    check_weights(good, info)
    wrong_rank = tmp_path / "r4.safetensors"
    wrong_rank.write_bytes(synthetic_weights(rank=4))
    with pytest.raises(InvalidAdapter, match="not of rank 8"):
        check_weights(wrong_rank, info)
    other_module = tmp_path / "k.safetensors"
    other_module.write_bytes(synthetic_weights(modules=("k_proj",)))
    with pytest.raises(InvalidAdapter, match="not in target_modules"):
        check_weights(other_module, info)
    garbage = tmp_path / "bad.safetensors"
    garbage.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json at all")
    with pytest.raises(InvalidAdapter, match="does not parse"):
        check_weights(garbage, info)


def test_archives_zip_tar_and_their_refusals(tmp_path: Path) -> None:
    archive = tmp_path / "a.zip"
    archive.write_bytes(adapter_zip(folder="my-adapter/"))
    out = tmp_path / "zip-out"
    out.mkdir()
    size = extract_adapter(archive, out, max_bytes=10 << 20)
    assert size == sum(p.stat().st_size for p in out.iterdir())
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 8

    tar_path = tmp_path / "a.tar.gz"
    with tarfile.open(tar_path, "w:gz") as tf, zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            data = zf.read(info)
            member = tarfile.TarInfo("./" + info.filename.split("/")[-1])
            member.size = len(data)
            tf.addfile(member, io.BytesIO(data))
    out_tar = tmp_path / "tar-out"
    out_tar.mkdir()
    assert extract_adapter(tar_path, out_tar, max_bytes=10 << 20) == size

    with pytest.raises(InvalidAdapter, match="size limit"):
        extract_adapter(archive, tmp_path, max_bytes=size - 1)
    only_config = tmp_path / "c.zip"
    with zipfile.ZipFile(only_config, "w") as zf:
        zf.writestr("adapter_config.json", "{}")
    with pytest.raises(InvalidAdapter, match=r"lacks adapter_model\.safetensors"):
        extract_adapter(only_config, tmp_path, max_bytes=10 << 20)
    not_archive = tmp_path / "x.bin"
    not_archive.write_bytes(b"just bytes")
    with pytest.raises(InvalidAdapter, match="zip or tar"):
        extract_adapter(not_archive, tmp_path, max_bytes=10 << 20)


def test_settings_refuse_a_cache_smaller_than_the_slots() -> None:
    from pydantic import ValidationError

    from service.store.settings import AdapterSettings

    assert AdapterSettings(max_loras=4, max_cpu_loras=4).max_cpu_loras == 4
    with pytest.raises(ValidationError, match="at least FAIRWAY_MAX_LORAS"):
        AdapterSettings(max_loras=4, max_cpu_loras=2)
