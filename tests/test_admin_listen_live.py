"""``[admin] listen``: the admin API and the operator console on a listener of their own, and
``[admin] http = false``: not on the public one (a daemon of its own)."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.live import Daemon, free_port

pytestmark = pytest.mark.live


def test_the_admin_api_on_its_own_listener_and_not_on_the_public_one(tmp_path, sim):
    port = free_port()
    daemon = Daemon(tmp_path / "d", sim.url, extra=f'[admin]\nhttp = false\nlisten = "127.0.0.1:{port}"\n')
    try:
        token = daemon.admin.call("POST", "/admin-tokens", {"name": "internal", "scopes": ["read"]})["token"]
        auth = {"authorization": f"Bearer {token}"}
        admin_url = f"http://127.0.0.1:{port}"
        assert re.search(rf"admin API and operator console at http://127\.0\.0\.1:{port}", daemon.output.text)
        me = httpx.get(admin_url + "/admin/v1/me", headers=auth, timeout=10)
        assert me.status_code == 200 and me.json()["scopes"] == ["read"]
        assert httpx.get(admin_url + "/admin/signin", timeout=10).status_code == 200
        assert httpx.get(admin_url + "/console/static/console.css", timeout=10).status_code == 200
        # the API and the account console are not served there
        elsewhere = httpx.post(admin_url + "/v1/chat/completions", json={}, timeout=10)
        assert elsewhere.status_code == 404 and elsewhere.json()["error"]["code"] == "not_found"
        assert httpx.get(admin_url + "/console/signin", timeout=10).status_code == 404
        # and the public listener does not serve the admin API
        public = httpx.get(daemon.url + "/admin/v1/me", headers=auth, timeout=10)
        assert public.status_code == 404 and "[admin] http" in public.json()["error"]["message"]
        assert httpx.get(daemon.url + "/admin/signin", timeout=10).status_code == 404
    finally:
        daemon.stop()
