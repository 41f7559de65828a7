"""Kubeconfig files for the exporter the tests start: one cluster, one user, one context."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml


def kubeconfig(server: str, ca_pem: bytes | None, user: dict[str, Any]) -> dict[str, Any]:
    """A kubeconfig of *server* (trusting *ca_pem*, if given) as *user* (``{"token": ...}``)."""
    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "c",
        "clusters": [{"name": "c", "cluster": cluster}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": user}],
    }


def write_kubeconfig(path: Path, server: str, ca_pem: bytes | None, user: dict[str, Any]) -> Path:
    """:func:`kubeconfig` written to *path*."""
    path.write_text(yaml.safe_dump(kubeconfig(server, ca_pem, user)))
    return path


def exec_user(command: str) -> dict[str, Any]:
    """A user whose credentials come from the exec plugin *command*."""
    return {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": command,
            "interactiveMode": "Never",
        }
    }
