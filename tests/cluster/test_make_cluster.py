"""`make cluster` itself (scripts/cluster.py): what cluster.json says is what answers, the
environment reaches every process, a running cluster is not started twice, and a cluster without
Redis refuses to start (exit status 2)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.cluster.conftest import RATE_LIMIT, ROOT, card_json, cluster_lib


def test_cluster_json_names_every_replica_and_the_balancers(cluster: Any) -> None:
    written = json.loads((cluster.dir / "cluster.json").read_text())
    assert written == {
        "lb": cluster.lb, "web": cluster.web, "grpc_lb": cluster.grpc_lb, "grpc": cluster.grpc,
        "balancer_source": cluster.balancer_source,
    }  # fmt: skip
    assert len(written["web"]) == 2 and len(written["grpc"]) == 2
    for url in [written["lb"], *written["web"]]:
        assert httpx.get(f"{url}/readyz", timeout=10).status_code == 200
        # The environment given to the cluster reached this process (OPENWOP_RATE_LIMIT_REQUESTS),
        # and it advertises the balancer (OPENWOP_PUBLIC_URL), not itself.
        discovery = httpx.get(f"{url}/.well-known/openwop", timeout=10).json()
        assert discovery["extensions"]["openwop-host.limits"]["rateLimit"]["requests"] == RATE_LIMIT
        assert discovery["implementation"]["url"] == written["lb"]
    grpc_urls = [i["url"] for i in card_json(cluster.web[1])["supportedInterfaces"] if i["protocolBinding"] == "GRPC"]
    assert grpc_urls == [written["grpc_lb"]]


def test_a_running_cluster_is_not_started_twice(cluster: Any) -> None:
    with pytest.raises(cluster_lib.ClusterError, match="already running"):
        cluster_lib.start(cluster_dir=cluster.dir, env=cluster.env, lb_port=0, grpc_lb_port=0)
    assert all(proc.alive() for proc in cluster.procs.values())


def test_without_redis_make_cluster_says_so_and_exits_2(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "CLUSTER_DIR": str(tmp_path), "REDIS_URL": "redis://127.0.0.1:1/0"}
    done = subprocess.run(
        [sys.executable, "scripts/cluster.py", "start"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Redis is unreachable at 127.0.0.1:1" in done.stderr and "A cluster needs Redis" in done.stderr
    assert not (tmp_path / "state.json").exists()
