"""The deployment bundle (issue 19): Kubernetes manifests (deploy/kubernetes), systemd units
(deploy/systemd) and the Dockerfile.

- Every manifest validates offline against the Kubernetes schemas `kubernetes-validate` ships
  (strict: unknown fields are errors); the one CRD kind, ServiceMonitor, has no schema there: it
  is validated against the prometheus-operator's API types (the schemas npm's
  @kubernetes-models/prometheus-operator generates from them, run with node), against a strict
  schema of our own (they allow unknown fields), and cross-checked with the Services it selects.
- Overlays render with `kubectl kustomize` (no kubectl is a failure: scripts/test.sh installs it).
- Flags, variables, ports, probe paths, mountpaths and config keys in the rendered manifests are
  ones `gristd` accepts: names from `gristd proxy|target --help`, and the rendered pods are run
  here as local processes (their env, config file and Secrets as rendered; only addresses and
  volume paths mapped to this machine) until every probe passes.
- `systemd-analyze verify` passes for both units; the Dockerfile's COPY sources exist in the
  context (after .dockerignore) or are outputs of its own cargo build.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from conftest import GRISTD, REPO

K8S = REPO / "deploy" / "kubernetes"
SYSTEMD = REPO / "deploy" / "systemd"
OVERLAYS = ["playground-like", "production", "production-hostpath"]
RENDERS = ["base", *(f"overlays/{o}" for o in OVERLAYS)]
GRIST = GRISTD.parent / "grist"
# The newest Kubernetes the installed kubernetes-validate has schemas for.
KUBE_VERSION = kubernetes_validate.latest_version()
# Placed in a Secret for local runs of overlays whose own Secret holds placeholders.
TEST_SECRET = "7465737420636c7573746572207365637265742c206e6f7420612072656c2121"
STARTUP_TIMEOUT = float(os.environ.get("GRIST_STARTUP_TIMEOUT", "60"))


def _require_gristd() -> None:
    if not GRISTD.exists():
        pytest.fail(f"gristd binary not found at {GRISTD}: run `cargo build --bins` (or set GRISTD_BIN)")


# --- kustomize --------------------------------------------------------------------------------


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl not found: scripts/test.sh installs it (Debian kubernetes-client)")
    return path


# kustomize v5 warns about the v2-compatible fields the kustomizations use on purpose (they
# render with Debian's kubectl 1.20 too); anything else on stderr is a failure.
DEPRECATION = re.compile(r"^# Warning: '(bases|patchesStrategicMerge|patchesJson6902)' is deprecated\.")


@functools.lru_cache(maxsize=None)
def render(rel: str) -> tuple[dict, ...]:
    r = subprocess.run([_kubectl(), "kustomize", str(K8S / rel)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"kubectl kustomize {rel} failed:\n{r.stderr}"
    other = [line for line in r.stderr.splitlines() if line.strip() and not DEPRECATION.match(line)]
    assert not other, f"kubectl kustomize {rel} printed:\n" + "\n".join(other)
    docs = tuple(d for d in yaml.safe_load_all(r.stdout) if d)
    assert docs, f"{rel} rendered nothing"
    return docs


def one(docs, kind: str, name: str | None = None) -> dict:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def statefulsets(docs) -> dict[str, dict]:
    """The StatefulSets by role (`proxy`, `target`), from the gristd subcommand they run."""
    out = {}
    for sts in (d for d in docs if d["kind"] == "StatefulSet"):
        role = gristd_role(container(sts))
        assert role not in out, f"two StatefulSets run gristd {role}"
        out[role] = sts
    assert set(out) == {"proxy", "target"}, f"StatefulSets by role: {sorted(out)}"
    return out


def container(sts: dict) -> dict:
    cs = sts["spec"]["template"]["spec"]["containers"]
    assert len(cs) == 1, f"{sts['metadata']['name']}: one container expected"
    return cs[0]


def command_words(c: dict) -> list[str]:
    """The words of the container's command line, shell scripts (`sh -c`) split too."""
    argv = [*c.get("command", []), *c.get("args", [])]
    if argv[:2] == ["/bin/sh", "-c"]:
        return [*argv[:2], *shlex.split(argv[2], comments=True), *argv[3:]]
    return argv


def gristd_role(c: dict) -> str:
    words = command_words(c)
    at = [i for i, w in enumerate(words) if w.endswith("/gristd") or w == "gristd"]
    assert len(at) == 1, f"{c['name']}: expected gristd once in {words}"
    role = words[at[0] + 1]
    assert role in ("proxy", "target"), f"{c['name']}: gristd {role}"
    return role


def env_list(c: dict) -> list[dict]:
    return c.get("env", [])


def env_value(c: dict, name: str) -> str:
    found = [e for e in env_list(c) if e["name"] == name]
    assert len(found) == 1, f"{c['name']}: {name} set {len(found)} times"
    assert "value" in found[0], f"{c['name']}: {name} has no literal value"
    return found[0]["value"]


def secret_data(secret: dict) -> dict[str, str]:
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update(secret.get("stringData") or {})
    return data


def selects(selector: dict, labels: dict) -> bool:
    """A label selector (matchLabels only) against labels."""
    assert set(selector) <= {"matchLabels"}, f"selector {selector}: only matchLabels is checked here"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def service_selects(svc: dict, labels: dict) -> bool:
    """A Service's selector (a plain map) against pod labels."""
    selector = svc["spec"]["selector"]
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def service_port_to(svc: dict, port: int, sts: dict) -> int:
    """The Service port that reaches container port `port` of `sts`'s pods."""
    c = container(sts)
    named = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
    for p in svc["spec"]["ports"]:
        target = p.get("targetPort", p["port"])
        if named.get(target, target) == port:
            return p["port"]
    raise AssertionError(f"Service {svc['metadata']['name']} has no port to {port}")


# --- gristd's own word on names ----------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def gristd_help(role: str) -> tuple[frozenset, frozenset]:
    """(flags, variables) that `gristd <role> --help` lists."""
    _require_gristd()
    r = subprocess.run([str(GRISTD), role, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    flags = frozenset(re.findall(r"^\s+(?:-\w, )?(--[a-z0-9][a-z0-9-]*)", r.stdout, re.M))
    envs = frozenset(re.findall(r"\[env: ([A-Z0-9_]+)", r.stdout))
    # A parse that found nothing would make every check below pass.
    assert "--listen" in flags and "GRISTD_LISTEN" in envs and "GRISTD_CONFIG" in envs, r.stdout
    return flags, envs


@functools.lru_cache(maxsize=None)
def grist_envs() -> frozenset:
    """Variables the `grist` CLI reads: its --help, and the ones cli/src reads by name."""
    assert GRIST.exists(), f"grist binary not found next to gristd ({GRIST})"
    r = subprocess.run([str(GRIST), "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    names = set(re.findall(r"\[env: ([A-Z0-9_]+)", r.stdout))
    for src in (REPO / "cli" / "src").rglob("*.rs"):
        names.update(re.findall(r'"(GRIST_[A-Z0-9_]+)"', src.read_text()))
    assert "GRIST_ENDPOINT" in names
    return frozenset(names)


@functools.lru_cache(maxsize=None)
def config_keys() -> dict[str, str]:
    """`section.key` → nodes ("all", "proxy", "target") from docs/operations.md's settings
    table, which a Rust test keeps equal to gristd's config structs."""
    keys = {}
    for m in re.finditer(r"^\| `([a-z0-9_]+\.[a-z0-9_]+)` \|[^|]*\|[^|]*\| (\w+) \|", (REPO / "docs" / "operations.md").read_text(), re.M):
        keys[m.group(1)] = m.group(2)
    assert "node.listen" in keys and "auth.secret_file" in keys, "settings table not found in docs/operations.md"
    return keys


def toml_keys(text: str) -> list[str]:
    return [f"{s}.{k}" for s, table in tomllib.loads(text).items() for k in table]


# Variables of the manifests that are not gristd settings, and why they are there.
OTHER_ENV = {
    "POD_NAME": "downward API, used in $(POD_NAME) and by the proxy's start script",
    "POD_NAMESPACE": "downward API, used in $(POD_NAMESPACE)",
    "RUST_LOG": "log filter (docs/operations.md)",
    "MALLOC_ARENA_MAX": "glibc arenas of a busy target (docs/operations.md)",
    "GRISTMILL_JOIN_ALWAYS": "read by the proxy's start script",
}


def check_env_name(name: str, role: str, where: str, script: str = "") -> None:
    _, envs = gristd_help(role)
    if name.startswith("GRISTD_"):
        assert name in envs, f"{where}: {name} is not a variable of `gristd {role}`"
    elif name.startswith("GRIST_"):
        assert name in grist_envs(), f"{where}: {name} is not a variable of `grist`"
    else:
        assert name in OTHER_ENV, f"{where}: {name} is neither a gristd/grist variable nor a known one"
        if name.startswith("GRISTMILL_"):
            assert name in script, f"{where}: {name} is set but the start script does not read it"
        if name in ("RUST_LOG", "MALLOC_ARENA_MAX"):
            assert name in (REPO / "docs" / "operations.md").read_text()


# --- schemas ---------------------------------------------------------------------------------


def kustomizations() -> list[Path]:
    return sorted(K8S.rglob("kustomization.yaml"))


def test_every_yaml_file_is_a_resource_a_patch_or_a_kustomization():
    """So that the schema test below cannot miss a file: each YAML file under deploy/kubernetes
    is a kustomization, a resource of one (validated alone) or a patch (validated rendered)."""
    resources, patches = set(), set()
    for k in kustomizations():
        spec = yaml.safe_load(k.read_text())
        for r in spec.get("resources", []):
            resources.add((k.parent / r).resolve())
        for p in spec.get("patchesStrategicMerge", []):
            patches.add((k.parent / p).resolve())
        for p in spec.get("patchesJson6902", []):
            patches.add((k.parent / p["path"]).resolve())
        for b in [*spec.get("bases", []), *[r for r in spec.get("resources", []) if (k.parent / r).is_dir()]]:
            assert (k.parent / b / "kustomization.yaml").exists(), f"{k}: base {b} has no kustomization"
    assert len(kustomizations()) == 1 + len(OVERLAYS)
    for f in sorted(K8S.rglob("*.yaml")):
        f = f.resolve()
        kinds = (f.name == "kustomization.yaml") + (f in resources) + (f in patches)
        assert kinds == 1, f"{f.relative_to(REPO)}: not exactly one of kustomization/resource/patch"
    assert resources and patches


def _validate(doc: dict, where: str) -> str:
    try:
        return kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        raise AssertionError(f"{where}: {doc['kind']}/{doc['metadata']['name']}: {path}: {e.message}") from None


# Kinds without a schema in kubernetes-validate (CRDs), and the test that checks them instead.
CRD_KINDS = {("monitoring.coreos.com/v1", "ServiceMonitor"): "test_servicemonitor_has_the_fields_and_targets_it_needs"}


def _validate_all(docs, where: str) -> set:
    crds = set()
    for doc in docs:
        key = (doc["apiVersion"], doc["kind"])
        if key in CRD_KINDS:
            # Really has no schema there (else it must be validated like the rest).
            with pytest.raises(kubernetes_validate.SchemaNotFoundError):
                kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
            crds.add(key)
            continue
        _validate(doc, where)
    return crds


def test_kubernetes_validate_knows_a_current_kubernetes():
    major, minor = (int(x) for x in KUBE_VERSION.split(".")[:2])
    assert (major, minor) >= (1, 33), f"kubernetes-validate's newest schemas are for {KUBE_VERSION}"


def test_base_resource_files_validate_offline():
    base = yaml.safe_load((K8S / "base" / "kustomization.yaml").read_text())
    seen = set()
    for rel in base["resources"]:
        docs = [d for d in yaml.safe_load_all((K8S / "base" / rel).read_text()) if d]
        assert docs, rel
        seen |= {d["kind"] for d in docs}
        _validate_all(docs, f"base/{rel}")
    assert {"StatefulSet", "Service", "PodDisruptionBudget", "Secret", "ServiceMonitor"} <= seen


@pytest.mark.parametrize("rel", RENDERS)
def test_rendered_manifests_validate_offline(rel):
    docs = render(rel)
    crds = _validate_all(docs, rel)
    kinds = {d["kind"] for d in docs}
    assert {"StatefulSet", "Service", "ConfigMap", "Secret", "PodDisruptionBudget"} <= kinds
    assert crds == set(CRD_KINDS), f"{rel}: CRD kinds {crds}"


def test_the_validator_rejects_typos_and_wrong_types():
    """The schema check is strict: a misspelt field or a wrong type in a StatefulSet fails."""
    sts = json.loads(json.dumps(one(render("overlays/playground-like"), "StatefulSet", "gristmill-target")))
    _validate(sts, "as rendered")
    typo = json.loads(json.dumps(sts))
    typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {"periodSeconds": 5}
    wrong = json.loads(json.dumps(sts))
    wrong["spec"]["replicas"] = "two"
    for bad in (typo, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, KUBE_VERSION, strict=True)


# A schema of our own for the ServiceMonitor fields this bundle may use (field names and the
# duration pattern from the prometheus-operator API, monitoring.coreos.com/v1). Far smaller than
# the CRD's: unknown fields fail here, but fields of the CRD we do not use are not described.
DURATION = r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"
SECRET_KEY = {
    "type": "object", "required": ["name", "key"], "additionalProperties": False,
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
LABEL_SELECTOR = {
    "type": "object", "additionalProperties": False,
    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
                   "matchExpressions": {"type": "array"}},
}
SERVICEMONITOR_SCHEMA = {
    "type": "object", "required": ["apiVersion", "kind", "metadata", "spec"], "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name"]},
        "spec": {
            "type": "object", "required": ["selector", "endpoints"], "additionalProperties": False,
            "properties": {
                "selector": LABEL_SELECTOR,
                "namespaceSelector": {"type": "object", "additionalProperties": False, "properties": {
                    "any": {"type": "boolean"}, "matchNames": {"type": "array", "items": {"type": "string"}}}},
                "jobLabel": {"type": "string"},
                "endpoints": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "additionalProperties": False,
                    "anyOf": [{"required": ["port"]}, {"required": ["targetPort"]}],
                    "properties": {
                        "port": {"type": "string"},
                        "targetPort": {"type": ["string", "integer"]},
                        "path": {"type": "string", "pattern": "^/"},
                        "scheme": {"enum": ["http", "https"]},
                        "interval": {"type": "string", "pattern": DURATION},
                        "scrapeTimeout": {"type": "string", "pattern": DURATION},
                        "honorLabels": {"type": "boolean"},
                        "authorization": {"type": "object", "additionalProperties": False, "properties": {
                            "type": {"type": "string"}, "credentials": SECRET_KEY}},
                        "tlsConfig": {"type": "object"},
                        "relabelings": {"type": "array"},
                        "metricRelabelings": {"type": "array"},
                    },
                }},
            },
        },
    },
}


# The prometheus-operator's API types for node (scripts/test.sh installs them).
K8S_MODELS = REPO / "build" / "k8s-models"


def operator_types_check(docs: list) -> subprocess.CompletedProcess:
    assert (K8S_MODELS / "node_modules" / "@kubernetes-models" / "prometheus-operator").is_dir(), \
        "run scripts/test.sh: it installs @kubernetes-models/prometheus-operator into build/k8s-models"
    return subprocess.run(
        ["node", str(Path(__file__).with_name("servicemonitor_check.mjs")), str(K8S_MODELS)],
        input=json.dumps(docs), capture_output=True, text=True, timeout=60,
    )


@pytest.mark.parametrize("rel", RENDERS)
def test_servicemonitor_matches_the_operator_api_types(rel):
    sm = one(render(rel), "ServiceMonitor")
    r = operator_types_check([sm])
    assert r.returncode == 0 and r.stdout.startswith("ok "), r.stdout + r.stderr
    # Not vacuous: a wrong type, a scheme that is not one, a numeric port name each fail.
    endpoint = sm["spec"]["endpoints"][0]
    broken = [
        {**sm, "spec": {**sm["spec"], "endpoints": [{**endpoint, **change}]}}
        for change in ({"interval": 30}, {"scheme": "gopher"}, {"port": 8080})
    ]
    r = operator_types_check(broken)
    assert r.returncode == 1 and r.stdout.count("invalid ") == 3, r.stdout + r.stderr


@pytest.mark.parametrize("rel", RENDERS)
def test_servicemonitor_has_the_fields_and_targets_it_needs(rel):
    docs = render(rel)
    sm = one(docs, "ServiceMonitor")
    jsonschema.Draft202012Validator(SERVICEMONITOR_SCHEMA).validate(sm)
    with pytest.raises(jsonschema.ValidationError):  # the schema is not vacuous
        jsonschema.Draft202012Validator(SERVICEMONITOR_SCHEMA).validate(
            {**sm, "spec": {**sm["spec"], "endpoint": sm["spec"]["endpoints"]}})
    sts = statefulsets(docs)
    services = [d for d in docs if d["kind"] == "Service" and selects(sm["spec"]["selector"], d["metadata"].get("labels", {}))]
    # Every pod of both roles is scraped, through a Service that lists it while not ready.
    for role, s in sts.items():
        pod_labels = s["spec"]["template"]["metadata"]["labels"]
        mine = [svc for svc in services if service_selects(svc, pod_labels)]
        assert len(mine) == 1, f"{rel}: {role} pods are scraped through {len(mine)} Services"
        assert mine[0]["spec"].get("publishNotReadyAddresses") is True
        for ep in sm["spec"]["endpoints"]:
            assert ep["path"] == "/metrics"
            (port,) = [p for p in mine[0]["spec"]["ports"] if p.get("name") == ep["port"]]
            # The scraped port is the one gristd listens on.
            assert port["port"] == service_port_to(mine[0], one_port(container(s)), s)
    # /metrics needs a cluster-read token when auth is on: the Secret and key must exist.
    for ep in sm["spec"]["endpoints"]:
        cred = ep["authorization"]["credentials"]
        assert cred["key"] in secret_data(one(docs, "Secret", cred["name"]))


def one_port(c: dict) -> int:
    ports = c.get("ports", [])
    assert len(ports) == 1 and ports[0]["name"] == "http", f"{c['name']}: ports {ports}"
    return ports[0]["containerPort"]


# --- overlays --------------------------------------------------------------------------------


def test_overlays_render_what_they_promise():
    small = statefulsets(render("overlays/playground-like"))
    assert small["proxy"]["spec"]["replicas"] == 1 and small["target"]["spec"]["replicas"] == 2
    prod = statefulsets(render("overlays/production"))
    assert prod["proxy"]["spec"]["replicas"] == 3 and prod["target"]["spec"]["replicas"] >= 4
    for role in ("proxy", "target"):
        anti = prod[role]["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
        assert set(anti) == {"requiredDuringSchedulingIgnoredDuringExecution"}, f"production {role}: {anti}"
        req = lambda s: container(s)["resources"]["requests"]  # noqa: E731
        assert parse_quantity(req(prod[role])["memory"]) > parse_quantity(req(small[role])["memory"])
    hostpath = statefulsets(render("overlays/production-hostpath"))["target"]
    assert "volumeClaimTemplates" not in hostpath["spec"]
    spec = hostpath["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"gristmill.io/nvme": "true"}
    vols = {v["name"]: v for v in spec["volumes"]}
    mount_paths = [m["mountPath"] for m in container(hostpath)["volumeMounts"]]
    for path in [*env_value(container(hostpath), "GRISTD_MOUNTPATHS").split(","), "/var/lib/gristmill/state"]:
        (mount,) = [m for m in container(hostpath)["volumeMounts"] if m["mountPath"] == under(path, mount_paths)]
        assert vols[mount["name"]]["hostPath"]["type"] == "Directory", path


def parse_quantity(q: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "m": 1e-3, "": 1}
    m = re.fullmatch(r"([0-9.]+)([A-Za-z]*)", q)
    return float(m.group(1)) * units[m.group(2)]


# --- flags, variables, ports, probes, volumes, config ------------------------------------------


def mounts(sts: dict) -> dict[str, tuple[dict, str]]:
    """mountPath → (volume source, kind) of the container: kind is `pvc`, `hostPath`,
    `emptyDir`, `configMap` or `secret`."""
    spec = sts["spec"]
    vols = {v["name"]: v for v in spec["template"]["spec"].get("volumes", [])}
    pvcs = {t["metadata"]["name"] for t in spec.get("volumeClaimTemplates", [])}
    out = {}
    for m in container(sts)["volumeMounts"]:
        if m["name"] in pvcs:
            assert m["name"] not in vols, f"{m['name']}: both a PVC and a volume"
            out[m["mountPath"]] = ({}, "pvc")
            continue
        v = vols[m["name"]]
        (kind,) = [k for k in ("hostPath", "emptyDir", "configMap", "secret") if k in v]
        out[m["mountPath"]] = (v[kind], kind)
    return out


def under(path: str, mount_paths) -> str:
    best = [m for m in mount_paths if path == m or path.startswith(m.rstrip("/") + "/")]
    assert best, f"{path} is on no volume (the root file system is read-only)"
    return max(best, key=len)


@pytest.mark.parametrize("rel", RENDERS)
def test_flags_variables_ports_and_probes_are_ones_gristd_accepts(rel):
    docs = render(rel)
    sts = statefulsets(docs)
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    for role, s in sts.items():
        c = container(s)
        where = f"{rel}: {s['metadata']['name']}"
        flags, _ = gristd_help(role)
        words = command_words(c)
        script = " ".join(words)
        for w in words:
            if w.startswith("--"):
                assert w.split("=")[0] in flags, f"{where}: {w} is not a flag of `gristd {role}`"
        for name in set(re.findall(r"\bGRISTD_[A-Z0-9_]+", script)):
            check_env_name(name, role, where)
        names = [e["name"] for e in env_list(c)]
        assert len(names) == len(set(names)), f"{where}: a variable is set twice"
        for e in env_list(c):
            check_env_name(e["name"], role, where, script)
        for ref in re.findall(r"\$\((\w+)\)", " ".join(e.get("value", "") for e in env_list(c))):
            assert ref in names, f"{where}: $({ref}) of no variable"
        securitycontext(s, where)

        # Ports: the one container port is where gristd listens and what it tells others.
        port = one_port(c)
        listen = env_value(c, "GRISTD_LISTEN")
        assert listen == f"0.0.0.0:{port}", f"{where}: GRISTD_LISTEN {listen} vs port {port}"
        peers = services[s["spec"]["serviceName"]]
        assert peers["spec"].get("clusterIP") == "None" and peers["spec"].get("publishNotReadyAddresses") is True
        assert service_selects(peers, s["spec"]["template"]["metadata"]["labels"])
        peer_port = service_port_to(peers, port, s)
        assert env_value(c, "GRISTD_PUBLIC_URL") == f"http://$(POD_NAME).{peers['metadata']['name']}.$(POD_NAMESPACE).svc:{peer_port}"
        # Targets, and proxies other than the founder, join through a Service of ready proxies.
        join = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", env_value(c, "GRISTD_JOIN"))
        assert join, f"{where}: GRISTD_JOIN"
        via = services[join.group(1)]
        proxy = sts["proxy"]
        assert service_selects(via, proxy["spec"]["template"]["metadata"]["labels"])
        assert not via["spec"].get("publishNotReadyAddresses") and via["spec"].get("clusterIP") != "None"
        assert int(join.group(2)) == service_port_to(via, one_port(container(proxy)), proxy)

        # Probes: liveness and startup on /v1/health, readiness on ?ready=true, on that port.
        for probe, path in (("startupProbe", "/v1/health"), ("livenessProbe", "/v1/health"),
                            ("readinessProbe", "/v1/health?ready=true")):
            get = c[probe]["httpGet"]
            assert get["path"] == path, f"{where}: {probe} {get['path']}"
            assert get["port"] in ("http", port), f"{where}: {probe} port {get['port']}"

        # Volumes: the state dir and every mountpath on their own persistent volume; the
        # config file and cluster secret from the ConfigMap and Secret of this render.
        vols = mounts(s)
        persistent = {p for p, (_, kind) in vols.items() if kind in ("pvc", "hostPath")}
        state = env_value(c, "GRISTD_STATE_DIR")
        assert state in persistent, f"{where}: state dir {state} is not a persistent volume"
        if role == "target":
            # One volume per mountpath (a folder in it, which the target can own), one for state.
            mps = env_value(c, "GRISTD_MOUNTPATHS").split(",")
            on = [under(mp, persistent) for mp in mps]
            assert len(mps) >= 2 and len(set(on)) == len(mps), f"{where}: mountpaths {mps} share volumes"
            assert set(on) | {state} == persistent, f"{where}: mountpaths {mps} vs volumes {sorted(persistent)}"
            assert state not in on
        else:
            assert persistent == {state}
        cfg_path = env_value(c, "GRISTD_CONFIG")
        cm_mount = under(cfg_path, vols)
        src, kind = vols[cm_mount]
        assert kind == "configMap"
        cm = one(docs, "ConfigMap", src["name"])
        key = cfg_path[len(cm_mount):].lstrip("/")
        assert key in cm["data"], f"{where}: ConfigMap {src['name']} has no {key}"
        config = tomllib.loads(cm["data"][key])
        for k in toml_keys(cm["data"][key]):
            assert k in config_keys(), f"{rel}: config key {k} is not a gristd setting"
        if config.get("auth", {}).get("enabled"):
            secret_file = config["auth"]["secret_file"]
            m = under(secret_file, vols)
            src, kind = vols[m]
            assert kind == "secret"
            item = secret_file[len(m):].lstrip("/")
            (key,) = [i["key"] for i in src.get("items", [{"key": item, "path": item}]) if i["path"] == item]
            assert key in secret_data(one(docs, "Secret", src["secretName"]))
        for e in env_list(c):
            ref = e.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                assert ref["key"] in secret_data(one(docs, "Secret", ref["name"])), f"{where}: {e['name']}"
        if role == "target":
            env_dir = config["etl"]["env_dir"]
            src, kind = vols[under(env_dir, vols)]
            assert kind == "emptyDir", f"{where}: etl.env_dir {env_dir} is not on a writable scratch volume"
            assert config["etl"]["python"] == "/usr/bin/python3"  # what the image's python3 is


def securitycontext(s: dict, where: str) -> None:
    pod = s["spec"]["template"]["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] == pod["runAsGroup"] == pod["fsGroup"] == IMAGE_UID
    sc = container(s)["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]


# --- the rendered pods, run here --------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url: str, token: str | None = None, body: dict | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode())
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except OSError as e:
        return 0, str(e)


class Pod:
    """One pod of a rendered StatefulSet as a local process: its volumes are directories under
    `root` (ConfigMap and Secret volumes filled from the render), its variables are evaluated as
    the kubelet does, and only the node's addresses are replaced by 127.0.0.1 ones. Run as root
    (CI), the process gets the pod's runAsUser/runAsGroup and its volumes the fsGroup's
    ownership, so the non-root setup is what runs; otherwise it runs as the current user."""

    def __init__(self, docs, sts: dict, ordinal: int, root: Path, join_url: str | None, secrets: dict):
        self.name = f"{sts['metadata']['name']}-{ordinal}"
        self.root = root / self.name
        c = container(sts)
        sc = sts["spec"]["template"]["spec"]["securityContext"]
        self.as_user = (sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"]) if os.geteuid() == 0 else None
        self.probes = {p: c[p]["httpGet"]["path"] for p in ("startupProbe", "livenessProbe", "readinessProbe")}
        vols = mounts(sts)
        # Longest first: a path is mapped by the mount it is under.
        self._mounts = sorted(vols, key=len, reverse=True)
        for path, (src, kind) in vols.items():
            local = self.local(path)
            local.mkdir(parents=True, exist_ok=True)
            if kind == "configMap":
                data = one(docs, "ConfigMap", src["name"])["data"]
            elif kind == "secret":
                data = {**secret_data(one(docs, "Secret", src["secretName"])), **secrets.get(src["secretName"], {})}
            else:
                if self.as_user:  # fsGroup: the volume's group, group-writable, setgid
                    os.chown(local, 0, self.as_user[2])
                    local.chmod(0o2775)
                continue
            items = src.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                # Paths inside config files are paths in the pod too.
                f = local / item["path"]
                f.write_text(self.map_paths(data[item["key"]]))
                if self.as_user:
                    os.chown(f, 0, self.as_user[2])
                    f.chmod(item.get("mode", src.get("defaultMode", 0o644)))
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env: dict[str, str] = {}
        for e in env_list(c):
            if "value" in e:
                # $(VAR) of a variable defined earlier; anything else stays as written.
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
            elif "fieldRef" in e["valueFrom"]:
                field = e["valueFrom"]["fieldRef"]["fieldPath"]
                value = {"metadata.name": self.name, "metadata.namespace": "gristmill-test"}[field]
            else:
                ref = e["valueFrom"]["secretKeyRef"]
                value = {**secret_data(one(docs, "Secret", ref["name"])), **secrets.get(ref["name"], {})}[ref["key"]]
            env[e["name"]] = self.map_paths(value)
        assert "$(" not in env["GRISTD_PUBLIC_URL"], f"{self.name}: unresolved {env['GRISTD_PUBLIC_URL']}"
        # The network of this machine instead of the cluster's.
        env["GRISTD_LISTEN"] = f"127.0.0.1:{self.port}"
        env["GRISTD_PUBLIC_URL"] = self.url
        if join_url is not None:
            env["GRISTD_JOIN"] = join_url
        self.env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(self.root), **env}
        argv = [*c.get("command", []), *c.get("args", [])]
        assert sum("/usr/local/bin/gristd" in a for a in argv) == 1, argv
        self.argv = [a.replace("/usr/local/bin/gristd", str(GRISTD)) for a in argv]
        self.log = self.root / "pod.log"
        self.proc: subprocess.Popen | None = None

    def local(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def map_paths(self, text: str) -> str:
        # One pass (a mapped path may start with another mount, /tmp): longest mount first.
        alternatives = "|".join(re.escape(m) for m in self._mounts)
        return re.sub(rf"(?<![\w./-])({alternatives})(?=/|\"|'|,|\s|$)", lambda m: str(self.local(m.group(1))), text)

    def start(self) -> "Pod":
        ids = {}
        if self.as_user:
            uid, gid, fs_group = self.as_user
            ids = {"user": uid, "group": gid, "extra_groups": [fs_group]}
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True, cwd="/", **ids)
        return self

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_probe(self, probe: str, timeout: float = STARTUP_TIMEOUT) -> str:
        deadline = time.monotonic() + timeout
        status, body = 0, ""
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited ({self.proc.returncode}):\n{self.output()[-3000:]}"
            status, body = http(self.url + self.probes[probe])
            if status == 200:
                return body
            time.sleep(0.2)
        raise AssertionError(f"{self.name}: {probe} {self.probes[probe]} answered {status} {body}\n{self.output()[-3000:]}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=5)


UNKNOWN_KEY = "unknown config key"


@pytest.fixture(scope="module")
def unknown_key_warning_is_seen(tmp_path_factory):
    """The local runs fail on gristd's warning about unknown config keys; this makes sure that
    warning still looks the way they search for it."""
    _require_gristd()
    d = tmp_path_factory.mktemp("calibrate")
    (d / "c.toml").write_text("[node]\nbogus_key = 1\n")
    p = subprocess.Popen([str(GRISTD), "proxy", "--config", str(d / "c.toml"), "--listen", f"127.0.0.1:{free_port()}",
                          "--state-dir", str(d / "state")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env={"PATH": os.environ.get("PATH", ""), "RUST_LOG": "info"}, start_new_session=True)
    try:
        deadline, out = time.monotonic() + 20, b""
        os.set_blocking(p.stdout.fileno(), False)
        while time.monotonic() < deadline and b"bogus_key" not in out:
            out += p.stdout.read() or b""
            time.sleep(0.1)
        text = out.decode(errors="replace")
        assert UNKNOWN_KEY in text and "node.bogus_key" in text, text
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@pytest.fixture
def pods_root():
    """Where pods keep their volumes: a folder the pods' non-root user can reach (pytest's
    tmp_path is private to the user running the tests)."""
    root = Path(tempfile.mkdtemp(prefix="gristmill-deploy-"))
    root.chmod(0o755)
    yield root
    if os.environ.get("GRIST_KEEP_DATA"):
        print(f"pod volumes kept in {root}")
    else:
        shutil.rmtree(root, ignore_errors=True)


@contextlib.contextmanager
def running(docs, tmp: Path, secrets: dict, targets: int | None = None):
    """Starts the rendered proxies (ordinal 0 founds, the others join it) and targets."""
    sts = statefulsets(docs)
    pods: list[Pod] = []
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        founder = Pod(docs, sts["proxy"], 0, tmp, None, secrets).start()
        pods.append(founder)
        founder.wait_probe("readinessProbe")
        for i in range(1, sts["proxy"]["spec"]["replicas"]):
            pods.append(Pod(docs, sts["proxy"], i, tmp, founder.url, secrets).start())
        n = sts["target"]["spec"]["replicas"] if targets is None else targets
        for i in range(n):
            pods.append(Pod(docs, sts["target"], i, tmp, founder.url, secrets).start())
        yield pods
    finally:
        for p in reversed(pods):
            p.stop()


def check_pods(docs, pods: list[Pod], admin_password: str) -> None:
    for p in pods:
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            p.wait_probe(probe)
    proxy = pods[0]
    # Auth is on: the first admin has the password of the rendered Secret.
    status, body = http(proxy.url + "/v1/auth/login", body={"name": "admin", "password": admin_password})
    assert status == 200, f"login as admin with the Secret's password: {status} {body}"
    token = json.loads(body)["token"]
    smap = None
    for _ in range(50):
        status, body = http(proxy.url + "/v1/cluster?what=smap", token=token)
        if status == 200:
            smap = json.loads(body)
            if len(smap["tmap"]) == sum(p.name.startswith("gristmill-target") for p in pods):
                break
        time.sleep(0.2)
    assert smap is not None, "no cluster map"
    assert len(smap["pmap"]) == sum(p.name.startswith("gristmill-proxy") for p in pods), smap
    assert len(smap["tmap"]) == sum(p.name.startswith("gristmill-target") for p in pods), smap
    # The ServiceMonitor's endpoint: /metrics answers Prometheus text to a token, 401 without.
    sm = one(docs, "ServiceMonitor")
    (ep,) = sm["spec"]["endpoints"]
    for p in pods:
        assert http(p.url + ep["path"])[0] == 401, f"{p.name}: {ep['path']} without a token"
        status, body = http(p.url + ep["path"], token=token)
        assert status == 200 and "# TYPE " in body, f"{p.name}: {ep['path']}: {status} {body[:300]}"
    for p in pods:
        assert p.proc.poll() is None, f"{p.name} exited"
        assert UNKNOWN_KEY not in p.output(), f"{p.name}:\n{p.output()[-3000:]}"


def test_playground_like_pods_run_as_rendered(unknown_key_warning_is_seen, pods_root):
    """Every pod of the playground-like overlay (1 proxy, 2 targets), with the env, config file
    and Secrets exactly as rendered: all probes pass, the map lists every node, /metrics
    answers with the admin's token."""
    docs = render("overlays/playground-like")
    with running(docs, pods_root, secrets={}) as pods:
        assert len(pods) == 3
        check_pods(docs, pods, secret_data(one(docs, "Secret", "gristmill-secrets"))["admin-password"])


@pytest.mark.parametrize("overlay", ["production", "production-hostpath"])
def test_production_pods_refuse_the_placeholder_secret_and_run_with_a_real_one(unknown_key_warning_is_seen, pods_root, overlay):
    """The production Secret's placeholders stop a node at start (nothing runs with them); with
    a real secret put in, the 3 proxies and one target (of 6: one shows the pod template) with
    the production config file, 4 mountpaths and the rest of the rendered env pass every probe."""
    docs = render(f"overlays/{overlay}")
    (pods_root / "placeholder").mkdir()
    founder = Pod(docs, statefulsets(docs)["proxy"], 0, pods_root / "placeholder", None, {}).start()
    try:
        founder.proc.wait(timeout=STARTUP_TIMEOUT)
    finally:
        founder.stop()
    assert founder.proc.returncode != 0 and "not a hex cluster secret" in founder.output(), founder.output()[-2000:]
    secrets = {"gristmill-secrets": {"cluster.secret": TEST_SECRET, "admin-password": "prod-test-admin"}}
    with running(docs, pods_root / "real", secrets, targets=1) as pods:
        assert len(pods) == 4  # 3 proxies: ordinal 0 founds, 1 and 2 join
        check_pods(docs, pods, "prod-test-admin")
        target = pods[-1]
        assert len(env_value(container(statefulsets(docs)["target"]), "GRISTD_MOUNTPATHS").split(",")) == 4
        # Every mountpath is in use: the target made its layout in each.
        for mp in target.env["GRISTD_MOUNTPATHS"].split(","):
            assert any(Path(mp).iterdir()), f"{mp} is empty"


# --- systemd ---------------------------------------------------------------------------------

UNITS = {"proxy": SYSTEMD / "gristd-proxy.service", "target": SYSTEMD / "gristd-target.service"}


def unit_settings(path: Path) -> list[tuple[str, str, str]]:
    """(section, key, value) of a unit file (no continuation lines in ours)."""
    out, section = [], ""
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.append((section, key.strip(), value.strip()))
    return out


def verify(units: list[Path]) -> tuple[int, str]:
    systemd_analyze = shutil.which("systemd-analyze")
    if systemd_analyze is None:
        pytest.fail("systemd-analyze not found: scripts/test.sh installs it (Debian systemd)")
    r = subprocess.run([systemd_analyze, "verify", *map(str, units)], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def rendered_units(tmp: Path, edit=lambda text: text) -> list[Path]:
    """The units with ExecStart pointing at the gristd under test (verify needs it to exist)."""
    _require_gristd()
    out = []
    for path in UNITS.values():
        text, n = re.subn(r"^ExecStart=/usr/local/bin/gristd ", f"ExecStart={GRISTD} ", path.read_text(), flags=re.M)
        assert n == 1, path
        (tmp / path.name).write_text(edit(text))
        out.append(tmp / path.name)
    return out


def test_systemd_units_pass_systemd_analyze_verify(tmp_path):
    units = rendered_units(tmp_path)
    rc, out = verify(units)
    mine = [line for line in out.splitlines() if any(u.name in line or str(u) in line for u in units)]
    assert rc == 0 and not mine, out
    # The check sees a unit's warnings (an option misspelt, a value that does not parse).
    bad = tmp_path / "bad"
    bad.mkdir()
    units = rendered_units(bad, lambda t: t.replace("ProtectHome=yes", "ProtectHomes=yes").replace("UMask=0077", "UMask=bogus"))
    rc, out = verify(units)
    for u in units:
        # Found by the same test as above: lines that name the unit.
        assert sum(str(u) in line for line in out.splitlines()) == 2, out


def test_systemd_units_run_gristd_with_real_settings():
    sysusers = (SYSTEMD / "gristmill.sysusers.conf").read_text()
    assert re.search(r"^u gristmill ", sysusers, re.M)
    for role, path in UNITS.items():
        settings = unit_settings(path)
        get = lambda k: [v for s, key, v in settings if key == k]  # noqa: E731
        assert get("User") == ["gristmill"] and get("Group") == ["gristmill"], path.name
        (exec_start,) = get("ExecStart")
        argv = shlex.split(exec_start)
        assert argv[0] == "/usr/local/bin/gristd" and argv[1] == role, exec_start
        flags, _ = gristd_help(role)
        for a in argv[2:]:
            assert a.split("=")[0] in flags, f"{path.name}: {a}"
        env = {}
        for value in get("Environment"):
            for item in shlex.split(value):
                k, _, v = item.partition("=")
                env[k] = v
        (env_file,) = get("EnvironmentFile")
        example = SYSTEMD / Path(env_file.lstrip("-")).name
        assert example.exists(), f"{path.name}: no example for {env_file}"
        for line in example.read_text().splitlines():
            m = re.match(r"^#?([A-Z][A-Z0-9_]*)=(.*)$", line)
            if m:
                env.setdefault(m.group(1), m.group(2))
        for name in env:
            check_env_name(name, role, path.name)
        # The state dir is the unit's StateDirectory; mountpaths are writable under the sandbox.
        state_dirs = [f"/var/lib/{d}" for v in get("StateDirectory") for d in v.split()]
        assert env["GRISTD_STATE_DIR"] in state_dirs, path.name
        if role == "target":
            rw = [p.lstrip("-") for v in get("ReadWritePaths") for p in v.split()] + state_dirs
            for mp in env["GRISTD_MOUNTPATHS"].split(","):
                under(mp, rw)
            under(env["GRISTD_ETL_ENV_DIR"], state_dirs)
        assert env["GRISTD_CONFIG"] == "/etc/gristmill/gristd.toml"
    for k in toml_keys((SYSTEMD / "gristd.toml").read_text()):
        assert k in config_keys(), f"deploy/systemd/gristd.toml: {k} is not a gristd setting"


def test_systemd_example_config_runs(unknown_key_warning_is_seen, tmp_path):
    """A proxy and a target with the example config file and env files (addresses, state dir,
    mountpaths and the secret's path moved to this machine) get ready without warnings."""
    _require_gristd()
    (tmp_path / "cluster.secret").write_text(TEST_SECRET + "\n")
    procs, logs = [], []

    def start(role: str, extra: dict) -> str:
        port = free_port()
        env = {"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path), "RUST_LOG": "info",
               "GRISTD_CONFIG": str(SYSTEMD / "gristd.toml"), "GRISTD_CLUSTER_SECRET_FILE": str(tmp_path / "cluster.secret"),
               "GRISTD_LISTEN": f"127.0.0.1:{port}", "GRISTD_PUBLIC_URL": f"http://127.0.0.1:{port}",
               "GRISTD_STATE_DIR": str(tmp_path / role), **extra}
        log = tmp_path / f"{role}.log"
        logs.append(log)
        with open(log, "wb") as f:
            procs.append(subprocess.Popen([str(GRISTD), role], env=env, stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while http(url + "/v1/health?ready=true")[0] != 200:
            assert procs[-1].poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        return url

    try:
        proxy = start("proxy", {})
        start("target", {"GRISTD_JOIN": proxy, "GRISTD_MOUNTPATHS": f"{tmp_path}/disk0,{tmp_path}/disk1",
                         "GRISTD_ETL_ENV_DIR": str(tmp_path / "etl-envs")})
        for log in logs:
            assert UNKNOWN_KEY not in log.read_text(), log.read_text()
    finally:
        for p in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGTERM)
            p.wait(timeout=15)


# --- Dockerfile ------------------------------------------------------------------------------

DOCKERFILE = REPO / "Dockerfile"
# The uid the image runs as, and the manifests with it.
IMAGE_UID = 10001


def dockerfile_stages() -> list[dict]:
    """Stages of the Dockerfile: name, base, workdir and instructions (continuations joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[dict] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op == "FROM":
            m = re.fullmatch(r"(\S+)(?:\s+AS\s+(\S+))?", rest.strip(), re.I)
            stages.append({"base": m.group(1), "name": m.group(2), "workdir": "/", "ops": []})
            continue
        assert stages, f"{op} before FROM"
        if op == "WORKDIR":
            stages[-1]["workdir"] = os.path.join(stages[-1]["workdir"], rest.strip())
        stages[-1]["ops"].append((op, rest.strip(), stages[-1]["workdir"]))
    return stages


def copy_args(rest: str) -> tuple[dict, list[str], str]:
    """(--options, sources, destination) of a COPY/ADD, shell or JSON form."""
    words = shlex.split(rest)
    opts = {}
    while words and words[0].startswith("--"):
        k, _, v = words.pop(0)[2:].partition("=")
        opts[k] = v
    if words and words[0].startswith("["):
        words = json.loads(" ".join(words))
    return opts, words[:-1], words[-1]


def dockerignore_patterns() -> list[tuple[bool, re.Pattern]]:
    out = []
    for line in (REPO / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pat = line.lstrip("!").strip().strip("/")
        rx = ""
        i = 0
        while i < len(pat):
            if pat.startswith("**/", i):
                rx, i = rx + "(?:.*/)?", i + 3
            elif pat.startswith("**", i):
                rx, i = rx + ".*", i + 2
            elif pat[i] == "*":
                rx, i = rx + "[^/]*", i + 1
            elif pat[i] == "?":
                rx, i = rx + "[^/]", i + 1
            else:
                rx, i = rx + re.escape(pat[i]), i + 1
        out.append((negate, re.compile(rx + "$")))
    return out


def ignored(rel: str) -> bool:
    """Whether .dockerignore leaves `rel` (or a folder above it) out of the build context."""
    parts = Path(rel).parts
    result = False
    for negate, rx in dockerignore_patterns():
        if any(rx.match("/".join(parts[: i + 1])) for i in range(len(parts))):
            result = not negate
    return result


def workspace_packages() -> dict[str, dict]:
    """Package name → {dir, bins} of the workspace members."""
    root = tomllib.loads((REPO / "Cargo.toml").read_text())
    out = {}
    for member in root["workspace"]["members"]:
        manifest = tomllib.loads((REPO / member / "Cargo.toml").read_text())
        name = manifest["package"]["name"]
        bins = [b["name"] for b in manifest.get("bin", [])]
        if not bins and (REPO / member / "src" / "main.rs").exists():
            bins = [name]
        out[name] = {"dir": member, "bins": bins}
    return out


def cargo_target_dir() -> str:
    cfg = REPO / ".cargo" / "config.toml"
    return tomllib.loads(cfg.read_text()).get("build", {}).get("target-dir", "target") if cfg.exists() else "target"


def test_dockerignore_keeps_what_the_build_needs():
    assert ignored("build/debug/gristd") and ignored(".venv/bin/python"), "build/ and .venv/ stay out"
    needed = ["Cargo.toml", "Cargo.lock", ".cargo/config.toml", "LICENSE", "target/src/lib.rs", "target/Cargo.toml"]
    for pkg in workspace_packages().values():
        needed += [f"{pkg['dir']}/Cargo.toml", f"{pkg['dir']}/src"]
    # Files the sources embed (include_str!/include_bytes!), e.g. the ETL worker's python.
    for src in REPO.glob("*/src/**/*.rs"):
        for m in re.finditer(r"include_(?:str|bytes)!\(\s*\"([^\"]+)\"", src.read_text()):
            needed.append(str((src.parent / m.group(1)).resolve().relative_to(REPO)))
    assert "python/gristmill/etl_worker.py" in needed
    for rel in needed:
        assert (REPO / rel).exists(), rel
        assert not ignored(rel), f".dockerignore leaves out {rel}, which the build needs"


def test_dockerfile_copies_only_what_exists_after_its_build():
    stages = dockerfile_stages()
    names = {s["name"]: s for s in stages if s["name"]}
    assert len(stages) >= 2, "a multi-stage build"
    packages = workspace_packages()
    built: dict[str, set] = {}  # stage → paths cargo leaves there
    for s in stages:
        for op, rest, workdir in s["ops"]:
            if op == "RUN" and "cargo build" in rest:
                args = shlex.split(rest[rest.index("cargo build"):].split("&&")[0])
                assert "--release" in args and "--locked" in args, rest
                pkgs = [args[i + 1] for i, a in enumerate(args) if a in ("-p", "--package")]
                bins = [args[i + 1] for i, a in enumerate(args) if a == "--bin"]
                assert pkgs or bins, f"name what to build: {rest}"
                out = set(bins)
                for p in pkgs:
                    assert p in packages, f"{p} is not a workspace package"
                    out.update(packages[p]["bins"])
                all_bins = {b for p in packages.values() for b in p["bins"]}
                assert out <= all_bins, f"{out - all_bins} are not binaries of the workspace"
                built.setdefault(s["name"], set()).update(
                    os.path.join(workdir, cargo_target_dir(), "release", b) for b in out)
    assert built, "no cargo build in the Dockerfile"
    runtime = stages[-1]
    copied = set()
    for s in stages:
        for op, rest, workdir in s["ops"]:
            if op not in ("COPY", "ADD"):
                continue
            opts, sources, dest = copy_args(rest)
            for src in sources:
                if "from" in opts:
                    assert opts["from"] in names, f"COPY --from={opts['from']}: no such stage"
                    path = os.path.join(names[opts["from"]]["workdir"], src)
                    assert path in built.get(opts["from"], set()), f"{path} is not an output of that stage's cargo build"
                    if s is runtime:
                        copied.add(os.path.basename(path))
                else:
                    rel = os.path.normpath(src)
                    assert (REPO / rel).exists(), f"COPY {src}: not in the repository"
                    assert rel == "." or not ignored(rel), f"COPY {src}: left out by .dockerignore"
    assert {"gristd", "grist"} <= copied, f"runtime stage gets {copied}"
    ops = runtime["ops"]
    # Non-root, the uid the manifests run as, and the Python ETL runtime.
    (user,) = [rest for op, rest, _ in ops if op == "USER"]
    assert user.split(":")[0] == str(IMAGE_UID)
    installs = " ".join(rest for op, rest, _ in ops if op == "RUN" and "apt-get install" in rest)
    assert {"python3", "python3-numpy"} <= set(installs.split()), installs
    (entry,) = [rest for op, rest, _ in ops if op == "ENTRYPOINT"]
    (cmd,) = [rest for op, rest, _ in ops if op == "CMD"]
    assert json.loads(entry) == ["/usr/local/bin/gristd"]
    role, *args = json.loads(cmd)
    flags, _ = gristd_help(role)
    for a in args:
        if a.startswith("--"):
            assert a in flags, f"CMD {a} is not a flag of `gristd {role}`"
    for op, rest, _ in ops:
        if op == "ENV":
            for item in shlex.split(rest):
                check_env_name(item.partition("=")[0], role, "Dockerfile ENV")


# --- docs ------------------------------------------------------------------------------------


def grist_subcommands(path: list[str]) -> set[str]:
    r = subprocess.run([str(GRIST), *path, "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, f"grist {' '.join(path)}: {r.stderr}"
    if "\nCommands:\n" not in r.stdout:
        return set()
    block = r.stdout.split("\nCommands:\n", 1)[1].split("\n\n", 1)[0]
    return {line.split()[0] for line in block.splitlines() if line.strip()} - {"help"}


def test_grist_commands_in_the_deploy_docs_exist():
    """Every `grist ...` command in deploy/README.md's code blocks is a complete, real
    subcommand (the maintenance and decommission steps of upgrades and scaling among them)."""
    assert GRIST.exists(), f"grist binary not found next to gristd ({GRIST})"
    text = (REPO / "deploy" / "README.md").read_text()
    commands = set()
    for block in re.findall(r"```(?:sh|console|bash)?\n(.*?)```", text, re.S):
        for line in block.splitlines():
            for m in re.finditer(r"(?:^|[\s;|&(`$])grist ((?:[a-z][a-z-]*(?:\s+|$))+)", line):
                commands.add(tuple(m.group(1).split()))
    assert any(c[:3] == ("cluster", "maintenance", "start") for c in commands), commands
    assert any(c[:2] == ("cluster", "decommission") for c in commands), commands
    for words in sorted(commands):
        path: list[str] = []
        for w in words:
            if w not in grist_subcommands(path):
                break
            path.append(w)
        assert path, f"grist {' '.join(words)}: no such command"
        assert not grist_subcommands(path), f"grist {' '.join(words)}: incomplete, needs one of {grist_subcommands(path)}"
