"""docs/deploy/ agrees with the code: the Kubernetes and KEDA manifests parse, the flags, commands, settings, signals,
ports and queue keys they use exist and agree with each other, the grace period covers the stop, and the Grafana
dashboard is built on the metric names of issue 33 (every one of them, and nothing else)."""

from __future__ import annotations

import argparse
import json
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from kiq.cli import build_parser
from kiq.ext import Keyspace
from kiq.keys import QUEUE_PREFIX
from kiq.plugins.metrics.plugin import SETTINGS as METRICS_SETTINGS
from kiq.server.launcher import EXIT_GRACE, WORKER_SIGNALS
from kiq.settings import CORE_SETTINGS, ENV_PREFIX
from tests.support import ROOT

DEPLOY = ROOT / "docs" / "deploy"
# The metrics of issue 33 ("Build", /metrics). The ops-metrics work serves them; once a module constant lists the
# names the code exports, compare with it instead (note for the integrator).
ISSUE_33_METRICS = {
    "kiq_jobs_processed_total", "kiq_jobs_failed_total", "kiq_job_duration_seconds", "kiq_queue_size",
    "kiq_queue_latency_seconds", "kiq_retry_set_size", "kiq_dead_set_size", "kiq_scheduled_set_size",
    "kiq_busy_threads", "kiq_concurrency", "kiq_processes",
}  # fmt: skip
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")
FLEET_GAUGES = ("kiq_queue_size", "kiq_queue_latency_seconds", "kiq_retry_set_size", "kiq_dead_set_size",
                "kiq_scheduled_set_size")  # fmt: skip
# What the manifests use from the metrics/probes work of the same issue, built on another branch: accepted while
# this branch lacks it, checked like the rest once it is there.
NON_ROOT_UID = 10001


def documents(path: Path) -> list[dict[str, Any]]:
    with path.open() as stream:
        return [document for document in yaml.safe_load_all(stream) if document is not None]


def of_kind(kind: str, *paths: Path) -> list[dict[str, Any]]:
    return [document for path in paths for document in documents(path) if document["kind"] == kind]


def subcommands() -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def worker_flags() -> set[str]:
    return {flag for action in subcommands()["worker"]._actions for flag in action.option_strings}


def flags_in(args: list[str]) -> list[str]:
    return [arg for arg in args if arg.startswith("-")]


def option(args: list[str], *names: str) -> list[str]:
    """The values given to the flag ``names`` (each occurrence) in an argument list."""
    return [args[i + 1] for i, arg in enumerate(args[:-1]) if arg in names]


def assert_known_flags(args: list[str]) -> None:
    known = worker_flags()
    unknown = [flag for flag in flags_in(args) if flag not in known]
    assert not unknown, f"flags not in kiq worker --help: {unknown}"
    build_parser().parse_args(["worker", *args])  # the values parse too (an exit with usage if not)


def assert_kiq_command(command: list[str]) -> None:
    """``kiq SUBCOMMAND ...``: the console script exists and so does the subcommand."""
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert command[0] in scripts, command
    assert command[1] in subcommands(), command


# -- Kubernetes ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def deployment() -> dict[str, Any]:
    [found] = of_kind("Deployment", DEPLOY / "kubernetes" / "deployment.yaml")
    return found


def worker_container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


def test_every_manifest_parses_as_kubernetes_objects() -> None:
    paths = sorted(DEPLOY.rglob("*.yaml"))
    assert len(paths) == 4
    for path in paths:
        for document in documents(path):
            assert {"apiVersion", "kind", "metadata"} <= set(document), path
            assert document["metadata"]["name"], path


def test_the_deployment_runs_kiq_worker_with_flags_it_has(deployment: dict[str, Any]) -> None:
    args = worker_container(deployment)["args"]
    assert all(isinstance(arg, str) for arg in args)  # YAML would turn a bare 25 into an int
    assert_known_flags(args)
    assert option(args, "-q", "--queue") == ["critical,3", "default,1"]


def test_the_grace_period_covers_the_stop_and_the_requeue(deployment: dict[str, Any]) -> None:
    spec = deployment["spec"]["template"]["spec"]
    [timeout] = option(worker_container(deployment)["args"], "-t", "--timeout")
    # TERM -> exit within -t + EXIT_GRACE (+ the main loop's last look): below the grace with a margin
    assert float(timeout) + 2 <= spec["terminationGracePeriodSeconds"]
    assert EXIT_GRACE < 2
    assert float(timeout) == next(s.default for s in CORE_SETTINGS if s.name == "timeout")  # the documented default
    assert spec["terminationGracePeriodSeconds"] == 30  # Kubernetes' default: the default -t fits it


def test_the_probes_and_the_scrape_use_the_metrics_port(deployment: dict[str, Any]) -> None:
    template = deployment["spec"]["template"]
    container = worker_container(deployment)
    [port] = option(container["args"], "--metrics-port")
    [declared] = container["ports"]
    assert declared == {"name": "metrics", "containerPort": int(port)}
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == port and annotations["prometheus.io/path"] == "/metrics"


def test_pre_stop_sends_a_signal_the_worker_handles(deployment: dict[str, Any]) -> None:
    command = worker_container(deployment)["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    kill, signal_flag, pid = shlex.split(command[2])
    assert kill == "kill" and pid == "1"  # kiq is PID 1 (the image's exec-form ENTRYPOINT)
    assert signal_flag.removeprefix("-") in WORKER_SIGNALS and signal_flag == "-TSTP"


def test_the_worker_runs_as_the_image_s_non_root_user(deployment: dict[str, Any]) -> None:
    context = deployment["spec"]["template"]["spec"]["securityContext"]
    assert context["runAsNonRoot"] is True and context["runAsUser"] == NON_ROOT_UID
    env = {entry["name"]: entry for entry in worker_container(deployment)["env"]}
    assert env["KIQ_REDIS_URL"]["valueFrom"]["secretKeyRef"] == {"name": "kiq-redis", "key": "url"}
    assert_known_settings(env)


def assert_known_settings(names: Any) -> None:
    known = {setting.name for setting in [*CORE_SETTINGS, *METRICS_SETTINGS]}
    unknown = [name for name in names if name.removeprefix(ENV_PREFIX).lower() not in known]
    assert not unknown, f"no such settings: {unknown}"


# -- the Dockerfile ----------------------------------------------------------------------------------------------
def dockerfile() -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (INSTRUCTION, rest), continuation lines joined, comments left out."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0], line.split(None, 1)[1]) for line in lines]


def exec_form(rest: str) -> list[str]:
    value: list[str] = json.loads(rest)
    return value


def test_the_image_runs_kiq_worker_as_a_non_root_user_with_kiq_health_as_its_healthcheck() -> None:
    instructions = dockerfile()
    names = [name for name, _ in instructions]
    assert names.count("USER") == 1 and names.index("USER") > names.index("RUN")  # installed as root, runs as not
    [user] = [rest for name, rest in instructions if name == "USER"]
    [useradd] = [rest for name, rest in instructions if name == "RUN" and "useradd" in rest]
    assert f"--uid {NON_ROOT_UID}" in useradd and useradd.split()[-1] == user != "root"

    [healthcheck] = [rest for name, rest in instructions if name == "HEALTHCHECK"]
    assert_kiq_command(exec_form(healthcheck.split(" CMD ", 1)[1]))
    [entrypoint] = [exec_form(rest) for name, rest in instructions if name == "ENTRYPOINT"]
    assert entrypoint == ["kiq", "worker"]
    assert_kiq_command(entrypoint)
    [cmd] = [exec_form(rest) for name, rest in instructions if name == "CMD"]
    assert_known_flags(cmd)
    [stop_signal] = [rest for name, rest in instructions if name == "STOPSIGNAL"]
    assert stop_signal.removeprefix("SIG") in WORKER_SIGNALS

    env = dict(pair.split("=", 1) for name, rest in instructions if name == "ENV" for pair in rest.split())
    assert_known_settings(name for name in env if name.startswith(ENV_PREFIX))
    assert env["KIQ_TIMEOUT"] == "25" and env["KIQ_EMBEDDED"] == "0"
    [exposed] = [rest for name, rest in instructions if name == "EXPOSE"]
    assert exposed == env["KIQ_METRICS_PORT"]


def test_the_image_is_built_from_this_repository_with_the_metrics_extra() -> None:
    """kiq is on no package index: the image copies what its wheel is built of from the build context (a clone)
    and installs that, and the build sends Docker nothing else."""
    instructions = dockerfile()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wheel_sources = {"pyproject.toml", project["project"]["readme"], *project["project"]["license-files"],
                     *project["tool"]["setuptools"]["package-dir"].values()}  # fmt: skip
    copies = [rest.split() for name, rest in instructions if name == "COPY"]
    copied = {source for *sources, _ in copies for source in sources}
    assert copied == wheel_sources and all((ROOT / source).exists() for source in copied)
    [install] = [rest for name, rest in instructions if name == "RUN" and "pip install" in rest]
    workdirs = [rest for name, rest in instructions[: instructions.index(("RUN", install))] if name == "WORKDIR"]
    assert shlex.split(install)[:3] == ["pip", "install", ".[metrics]"] and workdirs[-1] == "/src/kiq"
    assert "metrics" in project["project"]["optional-dependencies"]
    ignored = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    assert ignored[1] == "*" and {line[1:] for line in ignored if line.startswith("!")} == wheel_sources


def test_every_page_gives_the_same_stop_timing() -> None:
    """The stop's bound is ``timeout`` + 2 s (kiq.server.launcher); every page says so, and none asks for more."""
    pages = [ROOT / "docs" / "guide" / "production.md", ROOT / "docs" / "guide" / "operations.md",
             ROOT / "docs" / "guide" / "worker.md", DEPLOY / "README.md", DEPLOY / "Dockerfile"]  # fmt: skip
    for page in pages:
        text = page.read_text()
        assert "+ 2 s" in text, page
        assert not re.search(r"\+ [3-9] s|-t 3[1-9]|stop_grace_period: 3[1-9]|stop-timeout 3[1-9]", text), page


# -- KEDA --------------------------------------------------------------------------------------------------------
def test_keda_scales_the_deployment_on_the_queue_lists_it_serves(deployment: dict[str, Any]) -> None:
    path = DEPLOY / "keda" / "scaledobject-queue-length.yaml"
    [scaled] = of_kind("ScaledObject", path)
    [auth] = of_kind("TriggerAuthentication", path)
    [secret] = of_kind("Secret", DEPLOY / "kubernetes" / "deployment.yaml")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    served = {entry.split(",")[0] for entry in option(worker_container(deployment)["args"], "-q")}
    triggers = scaled["spec"]["triggers"]
    assert {trigger["type"] for trigger in triggers} == {"redis"}
    lists = {trigger["metadata"]["listName"] for trigger in triggers}
    assert lists == {QUEUE_PREFIX + name for name in served}
    for trigger in triggers:
        assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
        assert int(trigger["metadata"]["listLength"]) > 0
    for ref in auth["spec"]["secretTargetRef"]:
        assert ref["name"] == secret["metadata"]["name"] and ref["key"] in secret["stringData"]


def test_keda_scales_a_cluster_on_the_hash_tagged_queue_lists(deployment: dict[str, Any]) -> None:
    path = DEPLOY / "keda" / "scaledobject-queue-length-cluster.yaml"
    [scaled] = of_kind("ScaledObject", path)
    [auth] = of_kind("TriggerAuthentication", path)
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    served = {entry.split(",")[0] for entry in option(worker_container(deployment)["args"], "-q")}
    triggers = scaled["spec"]["triggers"]
    assert {trigger["type"] for trigger in triggers} == {"redis-cluster"}  # KEDA's scaler that follows the slots
    lists = {trigger["metadata"]["listName"] for trigger in triggers}
    assert lists == {Keyspace("one").queue(name) for name in served}  # the keys a cluster's workers fetch from
    for trigger in triggers:
        assert trigger["authenticationRef"]["name"] == auth["metadata"]["name"]
        assert all(":" in address for address in trigger["metadata"]["addresses"].split(","))
    text = path.read_text()
    assert all(Keyspace(slots).queue("<name>") in text for slots in ("one", "queue"))  # both layouts named


def test_keda_scales_on_the_queue_latency_gauge(deployment: dict[str, Any]) -> None:
    [scaled] = of_kind("ScaledObject", DEPLOY / "keda" / "scaledobject-latency.yaml")
    assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus"
    query = trigger["metadata"]["query"]
    assert metric_names(query) == {"kiq_queue_latency_seconds"}
    served = {entry.split(",")[0] for entry in option(worker_container(deployment)["args"], "-q")}
    assert set(re.findall(r'queue="([^"]+)"', query)) <= served
    assert float(trigger["metadata"]["threshold"]) > 0


# -- Grafana -----------------------------------------------------------------------------------------------------
def metric_names(expression: str) -> set[str]:
    """The kiq metric families an expression reads (a histogram's _bucket/_sum/_count series count as it)."""
    names = set(re.findall(r"\bkiq_[a-z_]+", expression))
    return {next((name[: -len(s)] for s in HISTOGRAM_SERIES if name.endswith(s)), name) for name in names}


def test_the_grafana_dashboard_uses_every_metric_of_the_issue_and_no_other() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "kiq-dashboard.json").read_text())
    expressions = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    used = set().union(*map(metric_names, expressions))
    used |= metric_names(dashboard["templating"]["list"][0]["definition"])
    assert used == ISSUE_33_METRICS
    # the fleet gauges are the same on every worker: aggregated with max, never summed
    summed = re.compile(rf"\bsum\b(\s*by\s*\([^)]*\))?\s*\(\s*({'|'.join(FLEET_GAUGES)})\b")
    assert summed.search("sum by (queue) (kiq_queue_size)") and not summed.search("max(kiq_queue_size)")
    assert not [expression for expression in expressions if summed.search(expression)]
    assert all(panel["datasource"]["uid"] == "${DS_PROMETHEUS}" for panel in dashboard["panels"])
    assert len({panel["id"] for panel in dashboard["panels"]}) == len(dashboard["panels"])


# -- the directory's README --------------------------------------------------------------------------------------
def test_the_readme_links_every_file_and_its_commands_name_what_the_files_hold(deployment: dict[str, Any]) -> None:
    readme = (DEPLOY / "README.md").read_text()
    files = sorted(path.relative_to(DEPLOY).as_posix() for path in DEPLOY.rglob("*") if path.is_file())
    assert [name for name in files if name != "README.md" and f"]({name})" not in readme] == []
    applied = re.findall(r"kubectl apply -f (\S+)", readme)
    assert applied and [path for path in applied if not (DEPLOY / path).is_file()] == []
    assert f"deployment/{deployment['metadata']['name']}" in readme
    checked = re.findall(r"kubectl get scaledobject (\S+)", readme)
    scaled = {document["metadata"]["name"] for document in of_kind("ScaledObject", *DEPLOY.glob("keda/*.yaml"))}
    assert checked and set(checked) <= scaled
