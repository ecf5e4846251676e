"""Screenshots of every console page, for the README: ``.venv/bin/python docs/screenshots.py``.

Starts ``gatewayd serve --demo`` in a temporary directory (``--demo`` gives the demo
account its console password), adds a payment and a few keys, sends real requests
through the built-in simulator, then spreads those requests' timestamps over the last 30 days (the daemon
is stopped for that; amounts are untouched, so balances still add up) so the chart
has something to show. Chromium is Debian's, driven by Playwright, launched as the
browser tests launch it. Writes docs/screenshots/*.png.
"""

from __future__ import annotations

import datetime as dt
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import openai  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

from gatewayd.server import DEMO_EMAIL, DEMO_PASSWORD  # noqa: E402
from tests.console_helpers import browser_missing, launch  # noqa: E402
from tests.live import Admin  # noqa: E402

OUT = ROOT / "docs" / "screenshots"
EMAIL, PASSWORD = DEMO_EMAIL, DEMO_PASSWORD
BIN = Path(sys.executable).parent


class DemoDaemon:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.socket = str(workdir / "admin.sock")

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [str(BIN / "gatewayd"), "serve", "--demo", "--listen", "127.0.0.1:0", "--data-dir",
             str(self.workdir / "data"), "--admin-socket", self.socket],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
        )
        seen = []
        for line in self.proc.stdout:
            seen.append(line)
            if match := re.search(r"demo key: (sk-\w+)", line):
                self.secret = match.group(1)
                break
            if match := re.search(r"demo is running at (http://\S+)", line):
                self.url = match.group(1)
        else:
            raise RuntimeError("gatewayd --demo did not start:\n" + "".join(seen))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # keep the pipe drained
        self.admin = Admin(self.socket)

    def stop(self) -> None:
        self.admin.close()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise


def populate(demo: DemoDaemon) -> None:
    """Payments, keys and real requests (billed by the daemon as any request is)."""
    admin = demo.admin
    account = admin.call("GET", f"/accounts/{EMAIL}")
    admin.call("PATCH", f"/accounts/{account['id']}", {"name": "Demo", "timezone": "Europe/Paris"})
    admin.call("POST", f"/accounts/{account['id']}/payments", {"amount_nano": 25_000_000_000, "note": "bank transfer"})
    backend = admin.key(account["id"], name="production backend", spend_limit_nano=20_000_000_000,
                        models=["gpt-4.1-mini", "claude-sonnet-4-5", "gpt-4.1"])
    admin.key(account["id"], name="ci pipeline", allow_ips=["10.0.0.0/8"], expires_on="2027-03-31",
              spend_limit_nano=5_000_000_000)
    notebook = admin.key(account["id"], name="research notebook", group="default")
    plan = [
        (backend["secret"], "gpt-4.1-mini", 70), (backend["secret"], "claude-sonnet-4-5", 35),
        (backend["secret"], "gpt-4.1", 12), (notebook["secret"], "claude-haiku-4-5", 30),
        (demo.secret, "deepseek-chat", 25), (notebook["secret"], "gpt-4o", 8),
    ]
    rng = random.Random(7)
    calls = [(secret, model) for secret, model, count in plan for _ in range(count)]
    rng.shuffle(calls)  # interleaved, as real traffic is, so each day of the chart mixes models
    clients = {secret: openai.OpenAI(base_url=demo.url + "/v1", api_key=secret, max_retries=0)
               for secret, _, _ in plan}
    for secret, model in calls:
        words = rng.choice([40, 120, 300, 700])
        clients[secret].chat.completions.create(model=model, messages=[{
            "role": "user", "content": "Summarise this document. " * rng.randint(20, 400) + f"[[sim:words={words}]]",
        }])
    for client in clients.values():
        client.close()  # idle keep-alive connections would hold up the daemon's graceful stop
    admin.call("POST", f"/keys/{notebook['id']}/disable")


def spread_over_a_month(database: Path) -> None:
    """Move the demo requests' timestamps (not their amounts) across the last 30 days."""
    now = dt.datetime.now(dt.timezone.utc)
    rng = random.Random(11)
    conn = sqlite3.connect(database)
    with conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM usage ORDER BY id")]
        moments = sorted(now - dt.timedelta(days=29.5 * rng.random() ** 0.7, minutes=rng.randint(0, 600))
                         for _ in ids)
        for row_id, moment in zip(ids, moments):
            stamp = moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
            conn.execute("UPDATE usage SET created_at = ? WHERE id = ?", (stamp, row_id))
        conn.execute("UPDATE keys SET last_used_at = (SELECT max(created_at) FROM usage WHERE key_id = keys.id)")
        first = (now - dt.timedelta(days=31)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        later = (now - dt.timedelta(days=9, hours=3)).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        conn.execute("UPDATE payments SET created_at = ? WHERE note = 'demo credit'", (first,))
        conn.execute("UPDATE payments SET created_at = ? WHERE note = 'bank transfer'", (later,))
    conn.close()


def shoot(url: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
        page.goto(url + "/console/")
        page.fill("input[name=email]", EMAIL)
        page.screenshot(path=str(OUT / "signin.png"))
        page.fill("input[name=password]", PASSWORD)
        page.click("button:has-text('Sign in')")
        page.wait_for_url("**/console/keys")
        page.screenshot(path=str(OUT / "keys.png"), full_page=True)
        page.click("#new-key")
        page.fill("#name", "staging")
        page.fill("#spend_limit", "15")
        page.check("input[name=model_scope][value=selected]")
        page.check("input[name=models][value='gpt-4.1-mini']")
        page.check("input[name=models][value='claude-haiku-4-5']")
        page.screenshot(path=str(OUT / "key-new.png"), full_page=True)
        page.click("#save-key")
        page.wait_for_url("**/created")
        page.screenshot(path=str(OUT / "key-created.png"))
        page.click("nav >> text=Usage")
        page.set_viewport_size({"width": 1280, "height": 1300})
        page.screenshot(path=str(OUT / "usage.png"))
        page.set_viewport_size({"width": 1280, "height": 800})
        page.click("nav >> text=Balance")
        page.screenshot(path=str(OUT / "balance.png"), full_page=True)
        page.click("nav >> text=Models")
        page.screenshot(path=str(OUT / "models.png"))
        page.set_viewport_size({"width": 390, "height": 844})  # a phone
        page.click("nav >> text=Keys")
        page.screenshot(path=str(OUT / "keys-phone.png"))
        browser.close()


def main() -> None:
    reason = browser_missing()
    if reason:
        sys.exit(f"screenshots need the browser: {reason}")
    with tempfile.TemporaryDirectory(prefix="gatewayd-shots-") as tmp:
        demo = DemoDaemon(Path(tmp))
        demo.start()
        try:
            populate(demo)
        except BaseException:
            demo.proc.kill()
            raise
        demo.stop()
        spread_over_a_month(Path(tmp) / "data" / "gateway.db")
        demo.start()
        try:
            assert demo.admin.audit()["ok"], "the demo data no longer adds up"
            shoot(demo.url)
        finally:
            demo.stop()
    print("wrote", ", ".join(sorted(p.name for p in OUT.glob("*.png"))))


if __name__ == "__main__":
    main()
