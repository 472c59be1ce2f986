"""The SDK tells users how to reach the cluster over S3."""

import subprocess
import sys
from pathlib import Path

from gristmill import Client


def test_s3_settings_for_playground(cluster):
    s = Client(cluster).s3_settings()
    assert s["anonymous"] is True
    assert (s["access_key"], s["secret_key"]) == ("gristmill", "gristmill-secret")
    assert s["endpoint"] == cluster


def test_module_prints_s3_endpoint_and_credentials(cluster):
    out = subprocess.run(
        [sys.executable, "-m", "gristmill", cluster],
        check=True, capture_output=True, text=True, cwd=Path(__file__).parent.parent,
    ).stdout
    assert f"S3 endpoint: {cluster}" in out
    assert "gristmill-secret" in out
    assert "3 targets" in out
