#!/usr/bin/env python3
"""A stand-in `kubectl` for the hosts topic's Kubernetes line: there is no cluster in
the tests (`dockerkit.put_kubectl_first` puts it first on PATH).

It reads `kubectl exec -i -n NAMESPACE TARGET -c CONTAINER -- COMMAND...` as kubectl does
and refuses anything else: a terminal (`-t`, never binary-clean), a flag it does not know,
a missing `-i` (the command would get no stdin) or `--`, a target it was not told of.
It then runs COMMAND with `docker exec -i` in $STANDIN_CONTAINER, with what a pod's
process has in its environment: HOSTNAME set to the pod's name (from $STANDIN_PODS, a
JSON object of "NAMESPACE TARGET CONTAINER" to pod names) and KUBERNETES_SERVICE_HOST.
"""

from __future__ import annotations

import json
import os
import sys
from typing import NoReturn

VALUED = {"-n": "namespace", "--namespace": "namespace", "-c": "container", "--container": "container"}


def refuse(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(1)


def parse(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """The options and the command of `kubectl exec ARGS`."""
    if args[:1] != ["exec"]:
        refuse(f"the stand-in runs only `kubectl exec`, not {args[:1]}")
    options: dict[str, str] = {"namespace": "default"}
    words = iter(args[1:])
    for word in words:
        name, equals, value = word.partition("=")
        if word == "--":
            return options, list(words)
        if word in ("-i", "--stdin"):
            options["stdin"] = "yes"
        elif word in VALUED:
            options[VALUED[word]] = next(words, "")
        elif name in VALUED and name.startswith("--") and equals:
            options[VALUED[name]] = value
        elif word.startswith("-"):
            refuse(f"flag {word!r} refused (a terminal is never binary-clean) or unknown")
        elif "target" in options:
            refuse(f"a second target {word!r}: the command goes after --")
        else:
            options["target"] = word
    refuse("no -- before the command")


def main() -> NoReturn:
    options, command = parse(sys.argv[1:])
    if "stdin" not in options:
        refuse("no -i: the command would get no stdin")
    if not command:
        refuse("no command after --")
    where = f"{options['namespace']} {options.get('target')} {options.get('container')}"
    pod = json.loads(os.environ["STANDIN_PODS"]).get(where)
    if pod is None:
        refuse(f"no pod for {where!r}")
    env = [f"--env=HOSTNAME={pod}", "--env=KUBERNETES_SERVICE_HOST=10.96.0.1"]
    os.execvp("docker", ["docker", "exec", "-i", *env, os.environ["STANDIN_CONTAINER"], *command])


if __name__ == "__main__":
    main()
