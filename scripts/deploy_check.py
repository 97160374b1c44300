"""Checks the deployment files in deploy/ as far as this machine can without a cluster,
a container engine or a registry of images (scripts/deploy-check runs it in its venv).

- Kubernetes: every manifest by kubernetes-validate --strict against the Kubernetes
  versions in K8S_VERSIONS, the kustomization rendered by `kubectl kustomize` when kubectl
  is here, and what the manifests promise (probes on /healthz, requests and limits on every
  container, the Secrets they name shown in secrets.example.yaml, a node's token chosen by
  its pod's name).
- Compose: compose.yaml against the Compose specification's JSON schema (from the
  docker-compose package on PyPI) and its structure (healthchecks, volumes, env files).
- systemd: the units by `systemd-analyze verify` (a copy whose ExecStart is the agensh
  binary just built: verify checks that the program exists), any warning counted as a
  failure, and the hardening they promise.
- agensh.toml: every configuration the files carry, read by the real `agensh config`.
- Start-up: the hub's start-up scripts of the Kubernetes and Compose files run for real in a
  temporary directory standing for the volume (a first start and a restart), then the hub
  they prepared starts (on loopback), answers /healthz and stops cleanly on SIGTERM; a
  Kubernetes node without its token stops saying which token to issue.

Usage: deploy_check.py AGENSH_BINARY COMPOSE_SCHEMA
Prints one line per check and a closing "N passed, M failed".
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
# The oldest Kubernetes still widely run and the newest kubernetes-validate knows.
K8S_VERSIONS = ["1.30.0", "1.37.0"]

passed = 0
failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"ok    {name}")
    else:
        failed += 1
        print(f"FAIL  {name}" + (f"\n      {detail}" if detail else ""))


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def manifests():
    return sorted(p for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")


def docs(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def secret_refs(obj):
    """The names of the Secrets an object reads: secretKeyRef, secretRef, secret volumes."""
    found = set()
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("secretKeyRef", "secretRef") and isinstance(value, dict):
                found.add(value["name"])
            elif key == "secret" and isinstance(value, dict) and "secretName" in value:
                found.add(value["secretName"])
            else:
                found |= secret_refs(value)
    elif isinstance(obj, list):
        for value in obj:
            found |= secret_refs(value)
    return found


def kubernetes(agensh):
    files = manifests()
    for version in K8S_VERSIONS:
        r = run(["kubernetes-validate", "--strict", "--quiet", "-k", version, *map(str, files)])
        check(f"kubernetes-validate --strict -k {version}: {len(files)} manifests",
              r.returncode == 0, (r.stdout + r.stderr).strip())
    kubectl = shutil.which("kubectl")
    if kubectl:
        r = run([kubectl, "kustomize", str(K8S)])
        ok = r.returncode == 0
        if ok:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
                f.write(r.stdout)
            v = run(["kubernetes-validate", "--strict", "--quiet", "-k", K8S_VERSIONS[0], f.name])
            os.unlink(f.name)
            ok, detail = v.returncode == 0, (v.stdout + v.stderr).strip()
        else:
            detail = r.stderr.strip()
        check("kubectl kustomize deploy/kubernetes renders and validates", ok, detail)
    else:
        print("skip  kubectl kustomize (no kubectl here): the manifests were validated one by one")

    objects = {}
    for path in files:
        for d in docs(path):
            objects[(d["kind"], d["metadata"]["name"])] = d
    kustomized = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    check("kustomization lists namespace, hub and node",
          kustomized == ["namespace.yaml", "hub.yaml", "node.yaml"], str(kustomized))

    secrets = {name for (kind, name) in objects if kind == "Secret"}
    for (kind, name), d in objects.items():
        if kind != "StatefulSet":
            continue
        spec = d["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            res = c.get("resources", {})
            check(f"{name}/{c['name']}: memory and cpu requests, memory limit",
                  {"cpu", "memory"} <= set(res.get("requests", {}))
                  and "memory" in res.get("limits", {}), str(res))
            sc = c.get("securityContext", {})
            check(f"{name}/{c['name']}: no privilege escalation, capabilities dropped",
                  sc.get("allowPrivilegeEscalation") is False
                  and sc.get("capabilities", {}).get("drop") == ["ALL"], str(sc))
        check(f"{name}: runs as a non-root user", spec["securityContext"].get("runAsNonRoot") is True)
        check(f"{name}: state on a volume claim", bool(d["spec"].get("volumeClaimTemplates")))
        for ref in sorted(secret_refs(d)):
            check(f"{name}: Secret {ref} is shown in secrets.example.yaml", ref in secrets)

    hub = objects[("StatefulSet", "agensh-hub")]["spec"]["template"]["spec"]["containers"][0]
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"]:
        check(f"agensh-hub: {probe} on /healthz", hub.get(probe, {}).get("httpGet", {}).get("path") == "/healthz")
    check("agensh-hub: listens beyond loopback on 7420", "0.0.0.0:7420" in hub["args"])
    check("agensh-hub: the store URL from a Secret (AGENSH_STORE)",
          any(e["name"] == "AGENSH_STORE" and "secretKeyRef" in e.get("valueFrom", {}) for e in hub["env"]))
    node_set = objects[("StatefulSet", "agensh-node")]
    node = node_set["spec"]["template"]["spec"]["containers"][0]
    script = node["command"][-1]
    check("agensh-node: the token of the pod's own name, by file",
          '/etc/agensh/node-tokens/$HOSTNAME' in script and "agensh node --agent" in script)
    check("agensh-node: installs the agent it runs before it starts",
          script.index('agensh agents install "$AGENSH_AGENT"') < script.index('agensh node --agent "$AGENSH_AGENT"'))
    tokens = objects[("Secret", "agensh-node-tokens")]["stringData"]
    check("agensh-node: secrets.example.yaml has a token per replica",
          set(tokens) == {f"agensh-node-{i}" for i in range(node_set["spec"]["replicas"])}, str(sorted(tokens)))
    hub_url = next(e["value"] for e in node["env"] if e["name"] == "AGENSH_HUB")
    check("agensh-node: AGENSH_HUB is the hub's Service", hub_url == "http://agensh-hub.agensh.svc:7420", hub_url)

    for (kind, name), d in objects.items():
        if kind == "ConfigMap" and "agensh.toml" in d["data"]:
            agensh_config(agensh, f"ConfigMap {name}", d["data"]["agensh.toml"])


def agensh_config(agensh, what, text):
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "agensh.toml").write_text(text)
        env = dict(os.environ, ANTHROPIC_API_KEY="checked", AGENSH_DIR=tmp)
        r = run([agensh, "config", "--json"], env=env)
        check(f"{what}: agensh.toml read by `agensh config`", r.returncode == 0, r.stderr.strip())
        if r.returncode != 0:
            return
        settings = {s["key"]: s["value"] for s in json.loads(r.stdout)["settings"]}
        if not settings["hub.listen"].startswith("127."):
            check(f"{what}: a hub beyond loopback names the dashboard's origins",
                  bool(settings.get("hub.allowed_origins")), str(settings.get("hub.allowed_origins")))


def compose(agensh, schema_path):
    text = (DEPLOY / "compose.yaml").read_text()
    data = yaml.safe_load(text)
    schema = json.loads(Path(schema_path).read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(data), key=lambda e: list(e.path))
    check("compose.yaml against the Compose specification's schema", not errors,
          "; ".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors[:5]))
    services = data["services"]
    nodes = sorted(s for s in services if s.startswith("node-"))
    check("compose.yaml: postgres, hub and nodes", {"postgres", "hub"} <= set(services) and len(nodes) >= 2, str(list(services)))
    check("compose.yaml: hub healthcheck on /healthz", "/healthz" in " ".join(services["hub"]["healthcheck"]["test"]))
    check("compose.yaml: postgres healthcheck", "pg_isready" in " ".join(services["postgres"]["healthcheck"]["test"]))
    check("compose.yaml: the hub waits for a healthy postgres, nodes for a healthy hub",
          services["hub"]["depends_on"]["postgres"]["condition"] == "service_healthy"
          and all(services[n]["depends_on"]["hub"]["condition"] == "service_healthy" for n in nodes))
    declared = set(data.get("volumes", {}))
    for name, s in services.items():
        for v in s.get("volumes", []):
            source = v.split(":")[0]
            if source.startswith("./"):
                check(f"compose.yaml: {name} mounts {source}, which exists", (DEPLOY / source).exists())
            else:
                check(f"compose.yaml: {name}'s volume {source} is declared", source in declared)
        for env_file in s.get("env_file", []):
            example = "hub.env.example" if env_file == "hub.env" else "node.env.example"
            check(f"compose.yaml: {name}'s {env_file} has an example ({example})", (DEPLOY / example).exists())
        check(f"compose.yaml: {name} restarts", s.get("restart") == "unless-stopped")
    check("compose.yaml: node states are separate volumes",
          len({services[n]["volumes"][0].split(":")[0] for n in nodes}) == len(nodes))
    for f in ["agensh.toml", "node.toml"]:
        agensh_config(agensh, f"deploy/{f}", (DEPLOY / f).read_text())


REQUIRED = {
    "agensh-hub.service": ["User=agensh", "NoNewPrivileges=yes", "ProtectSystem=strict",
                           "ReadWritePaths=/var/lib/agensh", "Restart=on-failure",
                           "EnvironmentFile=-/etc/agensh/hub.env", "ProtectHome=yes"],
    "agensh-node@.service": ["User=agensh", "NoNewPrivileges=yes", "ProtectSystem=strict",
                             "ReadWritePaths=/var/lib/agensh", "Restart=on-failure",
                             "EnvironmentFile=/etc/agensh/node-%i.env", "Delegate=yes",
                             "ProtectHome=yes"],
}


def systemd(agensh):
    units = DEPLOY / "systemd"
    for unit, lines in REQUIRED.items():
        text = (units / unit).read_text().splitlines()
        for line in lines:
            check(f"{unit}: {line}", line in text)
    node = (units / "agensh-node@.service").read_text().splitlines()
    check("agensh-node@.service: the cgroup tree stays writable (no ProtectControlGroups)",
          not any(line.startswith("ProtectControlGroups=") for line in node))
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        check("systemd-analyze is installed", False, "install systemd (scripts/deploy-check does as root)")
        return
    with tempfile.TemporaryDirectory() as tmp:
        for unit in REQUIRED:
            text = (units / unit).read_text().replace("/usr/local/bin/agensh", agensh)
            Path(tmp, unit).write_text(text)
        # A template is verified as an instance of it.
        os.symlink(Path(tmp, "agensh-node@.service"), Path(tmp, "agensh-node@gpu-1.service"))
        for unit in ["agensh-hub.service", "agensh-node@gpu-1.service"]:
            r = run([analyze, "verify", "--man=no", str(Path(tmp, unit))], cwd=tmp)
            said = (r.stdout + r.stderr).strip()
            check(f"systemd-analyze verify {unit} (no warnings)", r.returncode == 0 and not said, said)


def serve_once(agensh, org, listen_args, env, what):
    """Starts `agensh hub` as the files start it (on loopback here), waits for /healthz, and
    stops it with SIGTERM as the engines do."""
    import signal
    import time
    import urllib.request
    args = [a if a != "0.0.0.0:7420" else "127.0.0.1:0" for a in listen_args]
    hub = subprocess.Popen([agensh, *args], env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
    info = Path(org, ".agensh", "hub.json")
    body, deadline = None, time.time() + 60
    try:
        while time.time() < deadline and hub.poll() is None:
            if info.exists():
                try:
                    url = json.loads(info.read_text())["url"]
                    with urllib.request.urlopen(url + "/healthz", timeout=5) as r:
                        body = r.read().decode()
                    break
                except (OSError, ValueError, KeyError):
                    pass
            time.sleep(0.2)
    finally:
        if hub.poll() is None:
            hub.send_signal(signal.SIGTERM)
        try:
            code = hub.wait(timeout=60)
        except subprocess.TimeoutExpired:
            hub.kill()
            code = hub.wait()
    err = hub.stderr.read().strip()
    check(f"{what}: the hub starts on that directory and answers /healthz", body is not None and body.strip() == "ok",
          err[-500:])
    check(f"{what}: SIGTERM stops the hub cleanly", code == 0, f"exit {code}: {err[-300:]}")


def bootstrap(agensh):
    """Runs the hub's start-up scripts of the Kubernetes and Compose files for real, twice (a
    first start and a restart), in a temporary directory standing for the volume, then
    starts the hub they prepared."""
    bindir = str(Path(agensh).parent)
    k8s = {(d["kind"], d["metadata"]["name"]): d for p in manifests() for d in docs(p)}
    hub_spec = k8s[("StatefulSet", "agensh-hub")]["spec"]["template"]["spec"]
    compose_hub = yaml.safe_load((DEPLOY / "compose.yaml").read_text())["services"]["hub"]
    cases = [
        ("Kubernetes hub", hub_spec["initContainers"][0]["command"][-1],
         k8s[("ConfigMap", "agensh-hub-config")]["data"]["agensh.toml"], hub_spec["containers"][0]["args"]),
        ("Compose hub", compose_hub["command"][0].replace("$$", "$"),
         (DEPLOY / "agensh.toml").read_text(), None),
    ]
    for what, script, config, args in cases:
        with tempfile.TemporaryDirectory() as tmp:
            etc = Path(tmp, "etc")
            etc.mkdir()
            Path(etc, "agensh.toml").write_text(config)
            data = Path(tmp, "data")
            data.mkdir()
            org = data / "org"
            local = (script.replace("/var/lib/agensh", str(data))
                           .replace("/etc/agensh", str(etc)))
            env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"], HOME=str(data),
                       ANTHROPIC_API_KEY="checked")
            env.pop("AGENSH_DIR", None)
            if args is None:
                # Compose's script ends by serving: run it up to there, serve separately.
                head, _, tail = local.rpartition("exec agensh hub")
                local, args = head, ["hub"] + tail.replace('"$org"', str(org)).split()
            for start in ["first start", "restart"]:
                r = run(["sh", "-c", local], env=env)
                check(f"{what}: the start-up script on a {start}", r.returncode == 0, r.stderr.strip())
            check(f"{what}: the organization is made and has the deployed agensh.toml",
                  Path(org, ".agensh", "store.sqlite").exists()
                  and Path(org, "agensh.toml").read_text() == config)
            serve_once(agensh, org, [a.replace("/var/lib/agensh", str(data)) for a in args], env, what)

    node = k8s[("StatefulSet", "agensh-node")]["spec"]["template"]["spec"]["containers"][0]
    with tempfile.TemporaryDirectory() as tmp:
        script = node["command"][-1].replace("/etc/agensh", tmp).replace("/var/lib/agensh", tmp)
        env = dict(os.environ, HOSTNAME="agensh-node-7", AGENSH_WORKERS="16", AGENSH_AGENT="claude")
        r = run(["sh", "-c", script], env=env)
        check("Kubernetes node without its token: stops and says which to issue",
              r.returncode == 1 and "agensh nodes add agensh-node-7 --workers 16" in r.stderr, r.stderr.strip())


def dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", text, re.M)
    check("Dockerfile: a Rust build stage and a Debian slim runtime",
          len(stages) == 2 and stages[0].startswith("rust:") and stages[1].startswith("debian:") and "slim" in stages[1],
          str(stages))
    check("Dockerfile: runs as a user of its own", re.search(r"^USER agensh$", text, re.M) is not None)
    check("Dockerfile: git in the runtime", re.search(r"apt-get install[^\n]*\\?\n?[^\n]*\bgit\b", text) is not None)


def main():
    agensh, schema = sys.argv[1], sys.argv[2]
    kubernetes(agensh)
    compose(agensh, schema)
    systemd(agensh)
    dockerfile()
    bootstrap(agensh)
    print(f"deploy: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
