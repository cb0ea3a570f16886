"""`fairway bench replay` end to end against a sim-engine stack: a tiny Azure-format trace
replayed as two realtime tenants and a batch tenant; the tenants are made through the admin
API, every realtime request streams back, every batch line completes through the Batch API."""

from __future__ import annotations

import json
from pathlib import Path

from service.cli.main import main
from service.store.settings import DEV_ADMIN_TOKEN
from tests.support.admin import Admin
from tests.support.stack import Stack

TRACE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:15:46.0000000,40,5
2023-11-16 18:15:46.5000000,900,3
2023-11-16 18:15:47.0000000,30,200
2023-11-16 18:15:47.2500000,20,4
2023-11-16 18:15:48.0000000,50,6
2023-11-16 18:15:48.5000000,60,2
2023-11-16 18:15:49.0000000,70,3
2023-11-16 18:15:55.0000000,10,9
"""


def test_replay_a_tiny_trace_end_to_end(sim_stack: Stack, tmp_path: Path) -> None:
    trace = tmp_path / "tiny.csv"
    trace.write_text(TRACE)
    mix = [{"share": 1, "tenant": "replay-it-rt", "tier": "premium",
            "service_tier": "priority"},
           {"share": 1, "tenant": "replay-it-std", "tier": "standard"},
           {"share": 1, "tenant": "replay-it-batch", "batch": True}]
    out = tmp_path / "figures.json"
    rc = main(["--base-url", sim_stack.base_url + "/v1", "--admin-token", DEV_ADMIN_TOKEN,
               "bench", "replay", str(trace), "--window", "0,5", "--rate-scale", "2",
               "--max-prompt", "64", "--max-output", "8", "--mix", json.dumps(mix),
               "--batch-every", "1", "--drain", "60", "--json", str(out)])
    assert rc == 0
    figures = json.loads(out.read_text())["fairway"]
    assert figures["duration_s"] == 2.5  # 5 trace seconds at twice the rate; 18:15:55 is out
    rows = {r["group"]: r for r in figures["realtime"]}
    batch = figures["batch"]
    realtime_sent = sum(r["sent"] for g, r in rows.items() if g != "all realtime")
    assert realtime_sent + sum(b["lines"] for b in batch) == 7
    for r in rows.values():
        # The fairway policy may refuse a request whose TTFT target it cannot meet.
        assert r["ok"] + r["refused"] == r["sent"] and r["ok"] > 0
        assert r["ttft_p50"] > 0 and r["tpot_p50"] > 0
    assert {g.split(" ")[0] for g in rows} <= {"replay-it-rt", "replay-it-std", "all"}
    assert [b["tenant"] for b in batch] == ["replay-it-batch"]
    assert batch[0]["lines_done"] == batch[0]["lines"] > 0
    assert batch[0]["files_done"] == batch[0]["files"]
    assert batch[0]["output_tokens"] > 0
    tenants = {t["name"]: t["tier"]
               for t in Admin(sim_stack.base_url).ok("GET", "/admin/tenants")["data"]}
    assert tenants["replay-it-rt"] == "premium"
    assert tenants["replay-it-batch"] == "standard"
