"""deploy/helm/openwop-host rendered by Helm for its default values and each ci/*-values.yaml:
every object valid against its schema (strict), and the properties issue 37 asks of the chart."""

from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from importlib import metadata
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.chart.manifests import CHART, CI_VALUES, NAMESPACE, RELEASE, ROOT, render, validate, values_of

CASES = [None, *CI_VALUES]
DOCKERFILE = (ROOT / "docker" / "Dockerfile").read_text()
SECRET_ENV = {"DATABASE_URL": "databaseUrl", "REDIS_URL": "redisUrl", "DJANGO_SECRET_KEY": "djangoSecretKey"}


def case_id(path: Path | None) -> str:
    return path.name if path else "default"


class Rendered:
    def __init__(self, path: Path | None) -> None:
        self.overrides = values_of(path)
        with helm.Chart.load(CHART) as chart:
            self.values: dict[str, Any] = chart.merge_values(self.overrides)
        self.objects = render(self.overrides)
        self.fullname = f"{RELEASE}-openwop-host"

    def all(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [o for o in self.all(kind) if o["metadata"]["name"] == name]
        assert len(found) <= 1, (kind, name)
        return found[0] if found else None

    def deployment(self, component: str) -> dict[str, Any]:
        found = self.get("Deployment", f"{self.fullname}-{component}")
        assert found, f"no Deployment for {component}"
        return found

    def pod_specs(self) -> list[tuple[str, dict[str, Any]]]:
        owners = self.all("Deployment") + self.all("Job")
        return [(o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in owners]

    def components(self) -> list[str]:
        return ["web", "worker"] + (["grpc"] if self.values["grpc"]["enabled"] else [])


@pytest.fixture(scope="module", params=CASES, ids=case_id)
def chart(request: pytest.FixtureRequest) -> Rendered:
    return Rendered(request.param)


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return containers[0]


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env", [])}


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---- the rendered objects are valid Kubernetes ---------------------------------------------------


def test_every_object_is_valid_against_its_schema_strictly(chart: Rendered) -> None:
    assert chart.objects
    for obj in chart.objects:
        validate(obj)


def test_helm_lint_is_clean(chart: Rendered) -> None:
    report = helm.lint(CHART, chart.overrides, strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert not report["errors"] and not problems, report


# ---- processes -------------------------------------------------------------------------------------


def test_processes_run_what_the_image_holds(chart: Rendered) -> None:
    """Each command names a program the Dockerfile's `pip install .` puts on PATH (a console script
    of a declared dependency) or manage.py, which it copies into its WORKDIR, with a real command."""
    assert re.search(r"^WORKDIR /app$", DOCKERFILE, re.M) and re.search(r"^COPY manage\.py \./$", DOCKERFILE, re.M)
    scripts = {ep.name: ep.dist.name for ep in metadata.entry_points(group="console_scripts") if ep.dist}
    declared = metadata.requires("openwop-host") or []
    expected = {
        "web": ["uvicorn", "openwop_host.asgi:application"],
        "grpc": ["python", "manage.py", "grpc_serve"],
        "worker": ["celery", "-A", "openwop_host", "worker"],
        "beat": ["celery", "-A", "openwop_host", "beat"],
    }
    for component, head in expected.items():
        if component == "grpc" and not chart.values["grpc"]["enabled"]:
            assert chart.get("Deployment", f"{chart.fullname}-grpc") is None
            continue
        command = container(chart.deployment(component))["command"]
        assert command[: len(head)] == head, (component, command)
        program = command[0]
        if program == "python":
            name = command[2]
            assert list(ROOT.glob(f"apps/*/management/commands/{name}.py")), name
        else:
            assert any(re.match(rf"{scripts[program]}\b", r, re.I) for r in declared), (program, declared)
    web = container(chart.deployment("web"))["command"]
    # The flags of `make run` and docker/Dockerfile's CMD (bench/README.md §ASGI server).
    assert shlex.join(web).count("--loop uvloop --http httptools --lifespan off") == 1, web
    assert (ROOT / "openwop_host" / "asgi.py").read_text().count("\napplication = ") == 1


def test_forwarded_headers_are_believed_from_the_named_proxies_only(chart: Rendered) -> None:
    """uvicorn believes X-Forwarded-For from trustedProxyCidrs and from nobody when it is empty,
    which is the default: the operator names the ingress range (values.yaml)."""
    command = container(chart.deployment("web"))["command"]
    trusted = chart.values["trustedProxyCidrs"]
    if trusted:
        at = command.index("--forwarded-allow-ips")
        assert command[at - 1] == "--proxy-headers" and command[at + 1].split(",") == trusted
        assert "--no-proxy-headers" not in command
    else:
        assert "--no-proxy-headers" in command and "--proxy-headers" not in command
        assert "--forwarded-allow-ips" not in command
    assert "*" not in command
    if chart.values["ingress"]["enabled"] or chart.values["httpRoute"]["enabled"]:
        assert trusted  # the chart refuses an Ingress or HTTPRoute without it


def test_the_default_trusts_no_proxy() -> None:
    assert Rendered(None).values["trustedProxyCidrs"] == []


def test_beat_is_one_replica_recreated(chart: Rendered) -> None:
    beat = chart.deployment("beat")
    assert beat["spec"]["replicas"] == 1
    assert beat["spec"]["strategy"] == {"type": "Recreate"}
    targets = [h["spec"]["scaleTargetRef"]["name"] for h in chart.all("HorizontalPodAutoscaler")]
    assert beat["metadata"]["name"] not in targets
    beat_labels = beat["spec"]["template"]["metadata"]["labels"]
    assert not any(selects(p["spec"]["selector"]["matchLabels"], beat_labels) for p in chart.all("PodDisruptionBudget"))


def test_migrations_run_as_a_pre_install_and_pre_upgrade_hook(chart: Rendered) -> None:
    jobs = chart.all("Job")
    assert len(jobs) == 1
    job = jobs[0]
    hooks = set(job["metadata"]["annotations"]["helm.sh/hook"].split(","))
    assert hooks == {"pre-install", "pre-upgrade"}
    c = job["spec"]["template"]["spec"]["containers"][0]
    assert c["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
    # A hook runs before the release's other objects exist: it may lean on none of them.
    assert "serviceAccountName" not in job["spec"]["template"]["spec"] or chart.values["serviceAccountName"]


def test_services_select_their_pods_on_named_ports(chart: Rendered) -> None:
    services = {s["metadata"]["name"]: s for s in chart.all("Service")}
    for component in ["web", "grpc"]:
        name = f"{chart.fullname}-{component}"
        if component == "grpc" and not chart.values["grpc"]["enabled"]:
            assert name not in services
            continue
        service, deployment = services[name], chart.deployment(component)
        assert selects(service["spec"]["selector"], deployment["spec"]["template"]["metadata"]["labels"])
        ports = {p["name"] for p in container(deployment)["ports"]}
        assert {p["targetPort"] for p in service["spec"]["ports"]} <= ports


def test_ingress_and_httproute_route_to_the_web_service(chart: Rendered) -> None:
    web = chart.get("Service", f"{chart.fullname}-web")
    assert web
    ingresses, routes = chart.all("Ingress"), chart.all("HTTPRoute")
    assert len(ingresses) == int(chart.values["ingress"]["enabled"])
    assert len(routes) == int(chart.values["httpRoute"]["enabled"])
    port_names = {p["name"] for p in web["spec"]["ports"]}
    for ingress in ingresses:
        hosts = [rule["host"] for rule in ingress["spec"]["rules"]]
        assert hosts == chart.values["ingress"]["hosts"]
        for rule in ingress["spec"]["rules"]:
            backend = rule["http"]["paths"][0]["backend"]["service"]
            assert backend["name"] == web["metadata"]["name"] and backend["port"]["name"] in port_names
    for route in routes:
        assert route["spec"]["parentRefs"] == chart.values["httpRoute"]["parentRefs"]
        ref = route["spec"]["rules"][0]["backendRefs"][0]
        assert ref["name"] == web["metadata"]["name"]
        assert ref["port"] in {p["port"] for p in web["spec"]["ports"]}


def test_hpa_and_pdb_for_web_grpc_and_worker(chart: Rendered) -> None:
    hpas = {h["spec"]["scaleTargetRef"]["name"]: h for h in chart.all("HorizontalPodAutoscaler")}
    pdbs = chart.all("PodDisruptionBudget")
    for component in chart.components():
        deployment = chart.deployment(component)
        settings = chart.values[component]
        name = deployment["metadata"]["name"]
        if settings["autoscaling"]["enabled"]:
            hpa = hpas.pop(name)
            assert hpa["spec"]["scaleTargetRef"]["kind"] == "Deployment"
            assert hpa["spec"]["minReplicas"] == settings["autoscaling"]["minReplicas"] >= 1
            assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
            # The HPA owns the count: a replicas field would fight it on every upgrade.
            assert "replicas" not in deployment["spec"]
        else:
            assert deployment["spec"]["replicas"] == settings["replicas"]
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        covering = [p for p in pdbs if selects(p["spec"]["selector"]["matchLabels"], labels)]
        assert len(covering) == int(settings["podDisruptionBudget"]["enabled"]), component
    assert not hpas, f"HPAs for no Deployment: {list(hpas)}"
    all_labels = [d["spec"]["template"]["metadata"]["labels"] for d in chart.all("Deployment")]
    for pdb in pdbs:  # each budget covers exactly one Deployment's pods
        assert sum(selects(pdb["spec"]["selector"]["matchLabels"], labels) for labels in all_labels) == 1


def test_probes(chart: Rendered) -> None:
    web = container(chart.deployment("web"))
    assert web["readinessProbe"]["httpGet"]["path"] == "/readyz?scope=replica"  # a replica serves without workers
    assert web["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert web["startupProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"] for p in web["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert web[probe]["httpGet"]["port"] in ports
    if chart.values["grpc"]["enabled"]:
        grpc = container(chart.deployment("grpc"))
        grpc_ports = {p["name"]: p["containerPort"] for p in grpc["ports"]}
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            check = grpc[probe].get("grpc") or grpc[probe].get("tcpSocket")
            assert check and check["port"] in (*grpc_ports, *grpc_ports.values()), probe


def test_resources_on_every_container(chart: Rendered) -> None:
    for name, spec in chart.pod_specs():
        for c in spec["containers"]:
            requests, limits = c["resources"].get("requests", {}), c["resources"].get("limits", {})
            assert {"cpu", "memory"} <= set(requests) and "memory" in limits, name


def test_non_root_read_only_no_capabilities(chart: Rendered) -> None:
    uid = re.search(r"useradd .*--uid (\d+)", DOCKERFILE)
    assert uid, "docker/Dockerfile creates the image's user"
    for name, spec in chart.pod_specs():
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True and pod["seccompProfile"]["type"] == "RuntimeDefault", name
        assert spec["automountServiceAccountToken"] is False, name
        empty_dirs = {v["name"] for v in spec["volumes"] if "emptyDir" in v}
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] == int(uid.group(1)), name
            assert sc["readOnlyRootFilesystem"] is True, name
            assert sc["allowPrivilegeEscalation"] is False and sc.get("privileged", False) is False, name
            assert sc["capabilities"]["drop"] == ["ALL"] and not sc["capabilities"].get("add"), name
            assert sc["seccompProfile"]["type"] == "RuntimeDefault", name
            writable = {m["mountPath"] for m in c["volumeMounts"] if m["name"] in empty_dirs}
            assert "/tmp" in writable, name
            # Anything a process writes lies on a writable mount (beat's schedule file).
            for i, arg in enumerate(c["command"]):
                if arg == "--schedule":
                    assert any(c["command"][i + 1].startswith(w + "/") for w in writable), c["command"]


def test_the_image_var_dir_exists_so_settings_need_not_create_it() -> None:
    """settings.py mkdirs OPENWOP_VAR_DIR (exist_ok): on a read-only root it must already exist."""
    var_dir = re.search(r"OPENWOP_VAR_DIR=(\S+)", DOCKERFILE)
    assert var_dir and re.search(rf"mkdir -p {re.escape(var_dir.group(1))}\b", DOCKERFILE)


def test_secrets_come_from_existing_secrets_and_settings_from_values(chart: Rendered) -> None:
    assert not chart.all("Secret") and not chart.all("ConfigMap")
    for name, spec in chart.pod_specs():
        env = env_of(spec["containers"][0])
        for variable, key in SECRET_ENV.items():
            entry = env[variable]
            assert "value" not in entry, (name, variable)
            if variable == "DATABASE_URL" and chart.values["pgbouncer"]["enabled"] and name.endswith("-migrate"):
                key = "databaseDirectUrl"  # migrations bypass the pooler
            assert entry["valueFrom"]["secretKeyRef"] == chart.values["secrets"][key], (name, variable)
        broker = chart.values["secrets"].get("celeryBrokerUrl")
        if broker:
            assert env["CELERY_BROKER_URL"]["valueFrom"]["secretKeyRef"] == broker
        else:
            assert "CELERY_BROKER_URL" not in env
        assert env["DJANGO_DEBUG"]["value"] == "0"
        assert env["OPENWOP_PUBLIC_URL"]["value"] == chart.values["publicUrl"]
        hosts = env["DJANGO_ALLOWED_HOSTS"]["value"].split(",")
        assert hosts == [*chart.values["allowedHosts"], "$(POD_IP)"]
        # $(POD_IP) expands only from a variable defined before it.
        names = [e["name"] for e in spec["containers"][0]["env"]]
        assert names.index("POD_IP") < names.index("DJANGO_ALLOWED_HOSTS")
        for entry in spec["containers"][0]["env"]:  # no inline value looks like a credential
            assert not re.search(r"://[^/@\s]*:[^/@\s]*@", entry.get("value", "")), entry


def test_metrics_allowed_networks_and_service_monitor(chart: Rendered) -> None:
    cidrs = chart.values["metrics"]["allowCidrs"]
    env = env_of(container(chart.deployment("web")))
    if cidrs:
        assert env["OPENWOP_METRICS_ALLOW_CIDRS"]["value"].split(",") == cidrs
        for cidr in cidrs:
            ipaddress.ip_network(cidr)
    else:
        assert "OPENWOP_METRICS_ALLOW_CIDRS" not in env
    monitors = chart.all("ServiceMonitor")
    enabled = chart.values["metrics"]["serviceMonitor"]["enabled"]
    assert len(monitors) == (2 if enabled and chart.values["metrics"]["processPort"] else int(enabled))
    web = chart.get("Service", f"{chart.fullname}-web")
    assert web
    for monitor in monitors:
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        for key, value in chart.values["metrics"]["serviceMonitor"]["labels"].items():
            assert monitor["metadata"]["labels"][key] == value
    for monitor in [m for m in monitors if m["metadata"]["name"] == chart.fullname]:  # the web pods'
        selector = monitor["spec"]["selector"]["matchLabels"]
        assert [s for s in chart.all("Service") if selects(selector, s["metadata"]["labels"])] == [web]
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in web["spec"]["ports"]}


def _scraped_components(chart: Rendered) -> dict[str, int]:
    """component -> the container port a ServiceMonitor scrapes /metrics on, following each
    monitor to the Services it selects, their named target ports, and the pods those select."""
    scraped: dict[str, int] = {}
    for monitor in chart.all("ServiceMonitor"):
        (endpoint,) = monitor["spec"]["endpoints"]
        for service in chart.all("Service"):
            if not selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"]):
                continue
            targets = [p["targetPort"] for p in service["spec"]["ports"] if p["name"] == endpoint["port"]]
            for component in chart.components():
                deployment = chart.deployment(component)
                pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
                if targets and selects(service["spec"]["selector"], pod_labels):
                    ports = {p["name"]: p["containerPort"] for p in container(deployment).get("ports", [])}
                    assert targets[0] in ports, (monitor["metadata"]["name"], component, targets)
                    scraped[component] = ports[targets[0]]
    return scraped


def test_one_scrape_config_covers_every_process_that_counts(chart: Rendered) -> None:
    """Issue 51 item 3: with the ServiceMonitor on, every web, worker and gRPC pod is scraped (the
    worker's runs and pushes, gRPC's RPCs are counted in their own processes); worker and gRPC pods
    serve /metrics on metrics.processPort, the port their OPENWOP_METRICS_PORT names. The gRPC
    Service (possibly a public load balancer) never carries it."""
    port = chart.values["metrics"]["processPort"]
    for component in [c for c in chart.components() if c != "web"]:
        served = container(chart.deployment(component))
        ports = {p["name"]: p["containerPort"] for p in served.get("ports", [])}
        if port:
            assert env_of(served)["OPENWOP_METRICS_PORT"]["value"] == str(port) and ports["metrics"] == port
        else:
            assert "OPENWOP_METRICS_PORT" not in env_of(served) and "metrics" not in ports
    grpc = chart.get("Service", f"{chart.fullname}-grpc")
    assert grpc is None or {p["name"] for p in grpc["spec"]["ports"]} == {"grpc"}
    if not chart.values["metrics"]["serviceMonitor"]["enabled"]:
        assert _scraped_components(chart) == {}
        return
    scraped = _scraped_components(chart)
    assert set(scraped) == (set(chart.components()) if port else {"web"}), scraped
    for component in scraped.keys() - {"web"}:
        assert scraped[component] == port


def test_process_metrics_ports_are_off_with_zero() -> None:
    objects = render({"metrics": {"processPort": 0, "allowCidrs": ["10.42.0.0/16"],
                                  "serviceMonitor": {"enabled": True}}})  # fmt: skip
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceMonitor"] == [f"{RELEASE}-openwop-host"]
    for obj in objects:
        if obj["kind"] == "Deployment":
            for c in obj["spec"]["template"]["spec"]["containers"]:
                assert "OPENWOP_METRICS_PORT" not in env_of(c)


# ---- values the chart refuses -----------------------------------------------------------------------

BAD_VALUES = {
    "an inline DATABASE_URL": {"config": {"DATABASE_URL": "postgres://app:hunter2@db/app"}},
    "a secret value instead of a reference": {"secrets": {"djangoSecretKey": "hunter2"}},
    "an unknown key": {"web": {"replicaz": 3}},
    "a misspelt top-level key": {"ingres": {"enabled": True}},
    "a wrong type": {"worker": {"concurrency": "sixteen"}},
    "a public URL with a path": {"publicUrl": "https://agents.example.org/a2a/"},
    "an ingress with no host": {"ingress": {"enabled": True}},
    "an HTTPRoute with no parent": {"httpRoute": {"enabled": True}},
    "a chart variable overridden in config": {"config": {"DJANGO_DEBUG": "1"}},
}


@pytest.mark.parametrize("values", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_values_schema_refuses(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmValuesError):
        render(values)
    report = helm.lint(CHART, values, strict=True)
    assert any(m["severity"] == 3 for m in report["messages"]), report


def test_a_service_monitor_without_allowed_networks_fails_to_render() -> None:
    with pytest.raises(helm.HelmError, match=r"metrics\.allowCidrs"):
        render({"metrics": {"serviceMonitor": {"enabled": True}}})


ROUTED = {
    "an Ingress": {"ingress": {"enabled": True, "hosts": ["agents.example.org"]}},
    "an HTTPRoute": {"httpRoute": {"enabled": True, "parentRefs": [{"name": "public"}]}},
}


@pytest.mark.parametrize("values", ROUTED.values(), ids=ROUTED.keys())
def test_a_proxy_in_front_without_trusted_proxies_fails_to_render(values: dict[str, Any]) -> None:
    with pytest.raises(helm.HelmError, match=r"need trustedProxyCidrs"):
        render(values)
    assert render({**values, "trustedProxyCidrs": ["10.42.7.0/24"]})


@pytest.mark.parametrize("everyone", ["0.0.0.0/0", "::/0"])
def test_trusting_every_address_fails_to_render(everyone: str) -> None:
    with pytest.raises(helm.HelmError, match=r"trusts every address"):
        render({"trustedProxyCidrs": ["10.42.7.0/24", everyone]})


# ---- the rendered web container, booted ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


POD_IP = "10.1.2.3"


def start_rendered(c: dict[str, Any], tmp_path: Path, bind: str, port: int) -> subprocess.Popen[bytes]:
    """A rendered container's command with its rendered environment, secrets and the pod IP filled
    in the way the kubelet would, bound to loopback instead of every address."""
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "OPENWOP_VAR_DIR": str(tmp_path / "var")}
    filled = {
        "POD_IP": POD_IP,
        "DATABASE_URL": "postgres://postgres@127.0.0.1:9/unreachable",
        "REDIS_URL": "redis://127.0.0.1:9/0",
        "DJANGO_SECRET_KEY": "chart-test-" + "x" * 48,
    }
    for entry in c["env"]:
        value = filled[entry["name"]] if "valueFrom" in entry else entry["value"]
        env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], value)
    command = list(c["command"])
    command[command.index("--port") + 1] = str(port)
    command[command.index(bind) + 1] = "127.0.0.1"
    command[0] = str(Path(sys.executable).with_name(command[0]))
    log = (tmp_path / f"{c['name']}.log").open("wb")
    return subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_for(process: subprocess.Popen[bytes], tmp_path: Path, attempt: Any) -> Any:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, "\n".join(p.read_text() for p in tmp_path.glob("*.log"))
        try:
            return attempt()
        except OSError:
            assert time.monotonic() < deadline, "the container did not come up"
            time.sleep(0.2)


def test_rendered_web_container_answers_the_kubelets_probe(tmp_path: Path) -> None:
    """The probe's request (Host: the pod's IP and port, plain HTTP) gets 200 on /healthz, as does
    allowedHosts' name (DEBUG would refuse to serve it), and a name outside them gets 400."""
    chart = Rendered(None)
    c = container(chart.deployment("web"))
    port = _free_port()
    process = start_rendered(c, tmp_path, "--host", port)

    def get(path: str, host: str) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Host": host})
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)

    try:
        probe_host = f"{POD_IP}:{c['ports'][0]['containerPort']}"
        assert wait_for(process, tmp_path, lambda: get("/healthz", probe_host)) == 200
        assert get("/healthz", chart.values["allowedHosts"][0]) == 200
        assert get("/healthz", "attacker.example") == 400
    finally:
        process.terminate()
        process.wait(timeout=30)


PROXY, CLIENT = "127.66.0.1", "127.77.0.3"  # Linux answers all of 127/8 on loopback


def metrics_from(source: str, port: int, host: str, headers: dict[str, str] | None = None) -> bool:
    """GET /metrics over a connection from `source` (a loopback address bound as the client's):
    True when the view let the caller in (its 200, or 503 here: the database is unreachable and the
    backlog gauges need it), False for its refusal (the unknown path's 404)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10, source_address=(source, 0))
    try:
        connection.request("GET", "/metrics", headers={"Host": host, **(headers or {})})
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    if response.status == 404:
        assert body == b'{"error":"not_found","message":"No resource at /metrics."}'
        return False
    assert response.status in (200, 503), (response.status, body[:200])
    return True


SPOOFED = {"X-Forwarded-For": "127.0.0.1", "X-Forwarded-Proto": "https"}


@pytest.mark.parametrize("trusted", [[], [f"{PROXY}/32"]], ids=["default", "named proxy"])
def test_rendered_web_container_believes_forwarded_headers_from_trusted_proxies_only(
    tmp_path: Path, trusted: list[str]
) -> None:
    """/metrics allowed to 127.0.0.1 only: a client elsewhere claiming 127.0.0.1 is refused, and the
    named proxy is believed when it says so (only when it is named)."""
    chart = Rendered(None)
    chart.objects = render({
        "trustedProxyCidrs": trusted, "metrics": {"allowCidrs": ["127.0.0.1/32"]},
        "config": {"DATABASE_POOL_TIMEOUT": "0.5"},  # the database is unreachable: give up at once
    })  # fmt: skip
    port, host = _free_port(), chart.values["allowedHosts"][0]
    process = start_rendered(container(chart.deployment("web")), tmp_path, "--host", port)
    try:
        assert wait_for(process, tmp_path, lambda: metrics_from("127.0.0.1", port, host))
        assert not metrics_from(CLIENT, port, host)
        assert not metrics_from(CLIENT, port, host, SPOOFED)
        assert not metrics_from(PROXY, port, host)
        assert metrics_from(PROXY, port, host, SPOOFED) == bool(trusted)
    finally:
        process.terminate()
        process.wait(timeout=30)


def _dockerfile_command() -> tuple[list[str], dict[str, str]]:
    """The image's CMD (exec form) and the environment its ENV lines set about proxies."""
    joined = DOCKERFILE.replace("\\\n", " ")
    (cmd,) = re.findall(r"^CMD (\[.*\])$", joined, re.M)
    env = dict(re.findall(r'^ENV (FORWARDED_ALLOW_IPS)="?([^"\n]*)"?$', DOCKERFILE, re.M))
    return json.loads(cmd), env


def test_the_image_command_believes_no_forwarded_header_unless_named(tmp_path: Path) -> None:
    """docker/Dockerfile's own CMD and ENV: a client's X-Forwarded-For is not believed; the balancer's
    address in FORWARDED_ALLOW_IPS (as docker/compose.yaml sets it) is."""
    command, image_env = _dockerfile_command()
    assert "*" not in command and "--forwarded-allow-ips" not in command and "--proxy-headers" in command
    assert image_env == {"FORWARDED_ALLOW_IPS": ""}
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    balancer = compose["services"]["haproxy"]["networks"]["default"]["ipv4_address"]
    assert compose["x-app"]["environment"]["FORWARDED_ALLOW_IPS"] == balancer
    default = re.fullmatch(r"\$\{OPENWOP_BALANCER_ADDRESS:-([0-9.]+)\}", balancer)
    subnet = compose["networks"]["default"]["ipam"]["config"][0]["subnet"]
    network = re.fullmatch(r"\$\{OPENWOP_COMPOSE_SUBNET:-([0-9./]+)\}", subnet)
    assert default and network and ipaddress.ip_address(default[1]) in ipaddress.ip_network(network[1])
    for allow, proxy_believed in [(image_env["FORWARDED_ALLOW_IPS"], False), (PROXY, True)]:
        port = _free_port()
        command[command.index("--port") + 1] = str(port)
        command[command.index("--host") + 1] = "127.0.0.1"
        env = {
            "PATH": os.environ["PATH"], "HOME": str(tmp_path), "OPENWOP_VAR_DIR": str(tmp_path / "var"),
            "FORWARDED_ALLOW_IPS": allow, "DJANGO_SECRET_KEY": "image-test-" + "x" * 48,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1", "DJANGO_SECURE_SSL_REDIRECT": "0",
            "DATABASE_URL": "postgres://postgres@127.0.0.1:9/unreachable", "REDIS_URL": "redis://127.0.0.1:9/0",
            "OPENWOP_METRICS_ALLOW_CIDRS": "127.0.0.1/32",
        }  # fmt: skip
        program = [str(Path(sys.executable).with_name(command[0])), *command[1:]]
        log = (tmp_path / "web.log").open("wb")
        process = subprocess.Popen(program, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            assert wait_for(process, tmp_path, lambda: metrics_from("127.0.0.1", port, "127.0.0.1"))  # noqa: B023
            assert not metrics_from(CLIENT, port, "127.0.0.1", SPOOFED)
            assert metrics_from(PROXY, port, "127.0.0.1", SPOOFED) == proxy_believed
        finally:
            process.terminate()
            process.wait(timeout=30)


def test_rendered_grpc_container_answers_its_tcp_probe(tmp_path: Path) -> None:
    chart = Rendered(None)
    c = container(chart.deployment("grpc"))
    port = _free_port()
    process = start_rendered(c, tmp_path, "--bind", port)

    def serving() -> None:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # what the tcpSocket probe does
        if "A2A gRPC serving on grpc://127.0.0.1:" not in (tmp_path / "grpc.log").read_text():
            raise ConnectionError("bound, not yet serving")

    try:
        wait_for(process, tmp_path, serving)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_chart_values_file_is_yaml_the_schema_accepts() -> None:
    """values.yaml is what the schema describes: every key it sets is declared."""
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(defaults) == set(schema["properties"])


# ---- database connections at the autoscalers' maxima (issue 51 item 5) --------------------------------


def _pods_at_most(chart: Rendered, component: str) -> int:
    """The HPA's maximum (else the replica count), plus the rolling update's surge, as rendered."""
    deployment = chart.deployment(component)
    hpa = chart.get("HorizontalPodAutoscaler", deployment["metadata"]["name"])
    pods = hpa["spec"]["maxReplicas"] if hpa else deployment["spec"]["replicas"]
    strategy = deployment["spec"].get("strategy", {})
    surge = strategy.get("rollingUpdate", {}).get("maxSurge", "25%")  # Kubernetes' default
    assert isinstance(surge, str) and surge.endswith("%"), surge
    return int(pods + -(-pods * int(surge[:-1]) // 100))


def connections_at_maxima(chart: Rendered) -> tuple[int, int]:
    """(connections PostgreSQL can see, client connections of the release's pools), counted from the
    rendered objects: each serving pod's DATABASE_POOL_MAX_SIZE + OPENWOP_ASYNC_POOL_MAX_SIZE, each
    worker pod's --concurrency, one cache listener per pod of either, beat's lock and its Django
    connection, the migrations hook; behind the pooler, its poolSize for the pools and the rest direct."""
    pooled, listeners = 1, 0  # beat's Django connection
    for component in chart.components():
        c = container(chart.deployment(component))
        env = env_of(c)
        if component == "worker":
            per_pod = int(c["command"][c["command"].index("--concurrency") + 1])
            assert int(env["DATABASE_POOL_MAX_SIZE"]["value"]) == per_pod
        else:
            per_pod = int(env["DATABASE_POOL_MAX_SIZE"]["value"]) + int(env["OPENWOP_ASYNC_POOL_MAX_SIZE"]["value"])
        pods = _pods_at_most(chart, component)
        pooled += pods * per_pod
        listeners += pods
    pooler = chart.values["pgbouncer"]
    if pooler["enabled"]:
        return pooler["poolSize"] + listeners + 3, pooled  # + beat's lock, retention's lock, migrations
    return pooled + listeners + 2, pooled  # + beat's lock, migrations


def test_connections_at_the_maxima_fit_the_database(chart: Rendered) -> None:
    total, clients = connections_at_maxima(chart)
    database = chart.values["database"]
    assert total <= database["maxConnections"] - database["reservedConnections"]
    if chart.values["pgbouncer"]["enabled"]:
        assert clients <= chart.values["pgbouncer"]["maxClientConnections"]


def test_the_defaults_fit_postgresqls_default_max_connections() -> None:
    chart = Rendered(None)
    assert chart.values["database"] == {"maxConnections": 100, "reservedConnections": 10}
    assert connections_at_maxima(chart) == (89, 77)


# The shape issue 51 found: web 10 x (8 + 8 + listener), gRPC 6 x 17, workers 10 x (16 + listener).
ISSUE_51_MAXIMA = {
    "web": {"databasePoolMaxSize": 8, "asyncPoolMaxSize": 8, "autoscaling": {"maxReplicas": 10}},
    "grpc": {"databasePoolMaxSize": 8, "asyncPoolMaxSize": 8, "autoscaling": {"maxReplicas": 6}},
    "worker": {"concurrency": 16, "autoscaling": {"maxReplicas": 10}},
}


def _rendered_with(values: dict[str, Any]) -> Rendered:
    chart = Rendered(None)
    with helm.Chart.load(CHART) as loaded:
        chart.values = loaded.merge_values(values)
    chart.objects = render(values)
    return chart


def test_maxima_past_max_connections_are_refused_with_the_numbers_and_admitted_when_raised() -> None:
    message = (
        r"at the autoscalers' maxima the release can open 581 \(web 13 pods x 17 = 221, gRPC 8 pods x 17 = 136,"
        r" worker 13 pods x 17 = 221, beat 2, migrations 1; pods include a rolling update's surge\) but"
        r" database.maxConnections 100 - database.reservedConnections 10 leaves 90\. Lower the maxReplicas,"
        r" .*pgbouncer.enabled.*raise database.maxConnections to at least 591"
    )
    with pytest.raises(helm.HelmError, match=message):
        render(ISSUE_51_MAXIMA)
    with pytest.raises(helm.HelmError, match=r"can open 581 .* leaves 580\."):
        render({**ISSUE_51_MAXIMA, "database": {"maxConnections": 590}})
    admitted = _rendered_with({**ISSUE_51_MAXIMA, "database": {"maxConnections": 591}})
    assert connections_at_maxima(admitted)[0] == 581
    # The reserve counts: the same maxima with a bigger reserve are refused again.
    with pytest.raises(helm.HelmError, match=r"leaves 571\."):
        render({**ISSUE_51_MAXIMA, "database": {"maxConnections": 591, "reservedConnections": 20}})


def test_one_more_worker_thread_tips_the_defaults_over() -> None:
    """The check follows each input: the defaults sit one short of the budget (89 of 90)."""
    assert _rendered_with({"worker": {"concurrency": 6}}).objects
    with pytest.raises(helm.HelmError, match=r"can open 92 .*worker 3 pods x 8 = 24"):
        render({"worker": {"concurrency": 7}})


POOLER = {"pgbouncer": {"enabled": True}, "secrets": {"databaseDirectUrl": {"name": "db", "key": "direct"}}}


def test_behind_the_pooler_its_pool_size_counts_instead_of_the_pools() -> None:
    """The issue's maxima pass behind a pooler once its client limit holds them; past the database
    it is the pooler's pool size and the direct connections that are named."""
    values = {**ISSUE_51_MAXIMA, **POOLER, "pgbouncer": {"enabled": True, "maxClientConnections": 1000}}
    chart = _rendered_with(values)
    assert connections_at_maxima(chart) == (40 + 34 + 3, 545)
    with pytest.raises(helm.HelmError, match=r"pgbouncer.maxClientConnections 100 is below the 545 client connections"):
        render({**ISSUE_51_MAXIMA, **POOLER})
    too_big = {**values, "pgbouncer": {"enabled": True, "maxClientConnections": 1000, "poolSize": 60}}
    with pytest.raises(helm.HelmError, match=r"can open 97 \(pgbouncer.poolSize 60 \+ 37 direct: 34 cache listeners"):
        render(too_big)


def test_the_pooler_points_the_host_at_it_and_the_rest_at_postgresql() -> None:
    chart = _rendered_with(POOLER)
    direct = {"name": "db", "key": "direct"}
    for name, spec in chart.pod_specs():
        env = env_of(spec["containers"][0])
        if name.endswith("-migrate"):  # migrations speak to PostgreSQL itself, as without a pooler
            assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == direct, name
            assert "OPENWOP_DB_TRANSACTION_POOLER" not in env and "DATABASE_DIRECT_URL" not in env, name
            continue
        assert env["DATABASE_URL"]["valueFrom"]["secretKeyRef"] == chart.values["secrets"]["databaseUrl"], name
        assert env["OPENWOP_DB_TRANSACTION_POOLER"]["value"] == "1", name
        assert env["DATABASE_DIRECT_URL"]["valueFrom"]["secretKeyRef"] == direct, name
    for name, spec in Rendered(None).pod_specs():
        env = env_of(spec["containers"][0])
        assert "OPENWOP_DB_TRANSACTION_POOLER" not in env and "DATABASE_DIRECT_URL" not in env, name


def test_the_pooler_without_a_direct_url_is_refused() -> None:
    with pytest.raises(helm.HelmValuesError):
        render({"pgbouncer": {"enabled": True}})


@pytest.mark.parametrize("component", ["web", "grpc"])
def test_a_pool_size_of_zero_is_refused(component: str) -> None:
    """No pool opens a connection per request thread: no arithmetic bounds it."""
    with pytest.raises(helm.HelmValuesError):
        render({component: {"databasePoolMaxSize": 0}})


# ---- draining, beat's liveness, queue-depth autoscaling (issue 51 item 5) ----------------------------


def test_serving_pods_drain_before_sigterm(chart: Rendered) -> None:
    serving = ["web"] + (["grpc"] if chart.values["grpc"]["enabled"] else [])
    for component in serving:
        deployment = chart.deployment(component)
        sleep = container(deployment)["lifecycle"]["preStop"]["exec"]["command"]
        assert sleep == ["sleep", str(chart.values[component]["preStopSleepSeconds"])]
        assert int(sleep[1]) >= 1
        assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > int(sleep[1])


@pytest.mark.parametrize("component", ["web", "grpc"])
def test_a_grace_period_within_the_prestop_sleep_is_refused(component: str) -> None:
    with pytest.raises(helm.HelmError, match=rf"{component}.terminationGracePeriodSeconds \(5\) must exceed"):
        render({component: {"terminationGracePeriodSeconds": 5, "preStopSleepSeconds": 5}})


def test_worker_scales_on_queue_depth_when_asked(chart: Rendered) -> None:
    hpa = chart.get("HorizontalPodAutoscaler", f"{chart.fullname}-worker")
    settings = chart.values["worker"]["autoscaling"]
    if not settings["enabled"]:
        assert hpa is None
        return
    assert hpa
    external = [m["external"] for m in hpa["spec"]["metrics"] if m["type"] == "External"]
    queue = settings["queueDepth"]
    if not queue["enabled"]:
        assert external == []
        return
    (metric,) = external
    assert metric["metric"] == {"name": queue["metricName"], "selector": {"matchLabels": queue["selector"]}}
    assert metric["target"] == {"type": "AverageValue", "averageValue": str(queue["targetPerPod"])}
    assert any(m["type"] == "Resource" for m in hpa["spec"]["metrics"])  # CPU still counts


def test_some_ci_values_scale_workers_on_queue_depth() -> None:
    scaling = [values_of(p).get("worker", {}).get("autoscaling", {}) for p in CI_VALUES]
    assert any(s.get("queueDepth", {}).get("enabled") for s in scaling)


def _beat_probe(chart: Rendered, heartbeat: Path) -> list[str]:
    beat = container(chart.deployment("beat"))
    assert env_of(beat)["OPENWOP_BEAT_HEARTBEAT_FILE"]["value"] == "/tmp/beat-heartbeat"
    command = beat["livenessProbe"]["exec"]["command"]
    assert command[0] == "python"
    return [sys.executable, *[arg.replace("/tmp/beat-heartbeat", str(heartbeat)) for arg in command[1:]]]


def test_beat_liveness_probe_fails_on_a_stale_or_missing_heartbeat(tmp_path: Path) -> None:
    chart = Rendered(None)
    heartbeat = tmp_path / "beat-heartbeat"
    probe = _beat_probe(chart, heartbeat)
    assert subprocess.run(probe, capture_output=True).returncode != 0  # never written
    heartbeat.touch()
    assert subprocess.run(probe, capture_output=True).returncode == 0
    stale = time.time() - chart.values["beat"]["livenessProbe"]["staleSeconds"] - 5
    os.utime(heartbeat, (stale, stale))
    assert subprocess.run(probe, capture_output=True).returncode == 1


def test_rendered_beat_touches_its_heartbeat_while_standing_by(tmp_path: Path) -> None:
    """The rendered beat, its database unreachable (so it stands by, retrying the leader lock),
    keeps its heartbeat fresh: the probe passes on the file it writes, and fails once it stops."""
    chart = Rendered(None)
    c = container(chart.deployment("beat"))
    heartbeat = tmp_path / "beat-heartbeat"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "OPENWOP_VAR_DIR": str(tmp_path / "var"),
           "POD_IP": POD_IP, "DATABASE_URL": "postgres://postgres@127.0.0.1:9/unreachable",
           "REDIS_URL": "redis://127.0.0.1:9/0", "DJANGO_SECRET_KEY": "chart-test-" + "x" * 48}  # fmt: skip
    for entry in c["env"]:
        if "value" in entry:
            env[entry["name"]] = re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], entry["value"])
    env["OPENWOP_BEAT_HEARTBEAT_FILE"] = str(heartbeat)
    command = [arg.replace("/tmp/", f"{tmp_path}/") for arg in c["command"]]
    command[0] = str(Path(sys.executable).with_name(command[0]))
    log = (tmp_path / "beat.log").open("wb")
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    probe = _beat_probe(chart, heartbeat)
    try:
        wait_for(process, tmp_path, lambda: heartbeat.stat())
        old = time.time() - 3600
        os.utime(heartbeat, (old, old))
        assert subprocess.run(probe, capture_output=True).returncode == 1

        def fresh_again() -> None:
            if subprocess.run(probe, capture_output=True).returncode != 0:
                raise OSError("still stale")

        wait_for(process, tmp_path, fresh_again)
        assert (
            "stands by" in (tmp_path / "beat.log").read_text()
            or "cannot reach PostgreSQL" in (tmp_path / "beat.log").read_text()
        )
    finally:
        process.terminate()
        process.wait(timeout=30)
    os.utime(heartbeat, (old, old))
    assert subprocess.run(probe, capture_output=True).returncode == 1
