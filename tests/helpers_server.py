"""A real `tiermem serve` in a subprocess on a free loopback port, and a data root worth serving.

The server is started by the project's one launcher (`tiermem.app.server.launcher`),
exactly as a user starts it; readiness is the first successful `GET /healthz`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
from helpers_evolver import append_all, at, proposal
from helpers_runtime import episode

from tiermem.app.api import Memory
from tiermem.app.server.keys import KeyStore
from tiermem.app.server.launcher import LaunchedServer, clean_env, launch
from tiermem.eventlog import EventLog
from tiermem.settings import Settings, resolve_settings

AGENT = "support-bot"
OTHER_AGENT = "billing-bot"
ALICE_CANARY = "canary-ALICE-7731"
BOB_CANARY = "canary-BOB-9904"


@dataclass
class Server:
    """A running server (`tiermem.app.server.launcher`) and an HTTP client factory for it."""

    launched: LaunchedServer

    @property
    def url(self) -> str:
        return self.launched.url

    @property
    def data_dir(self) -> Path:
        return self.launched.data_dir

    @property
    def process(self) -> subprocess.Popen[bytes]:
        return self.launched.process

    def client(self, key: str | None = None) -> httpx2.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx2.Client(base_url=self.url, headers=headers, timeout=60)

    def log(self) -> str:
        return self.launched.log()


@contextmanager
def running_server(data_dir: Path, *extra: str) -> Iterator[Server]:
    with launch(data_dir, args=extra) as launched:
        yield Server(launched)


def settings_for(data_dir: Path) -> Settings:
    return resolve_settings(data_dir=data_dir, env={})


def make_key(
    data_dir: Path, *, operator: bool = False, agent: str | None = None, user: str | None = None
) -> str:
    created = KeyStore(settings_for(data_dir)).create(operator=operator, agent_id=agent, user=user)
    return str(created["key"])


@dataclass
class Seeded:
    proposal_ids: list[str]  # pending, for AGENT
    other_proposal_id: str  # pending, for OTHER_AGENT
    alice_turn: str
    home_proposal_id: str  # pending, with a diff against an active fact


def seed(data_dir: Path) -> Seeded:
    """Two users of one agent with canary strings, episodes, pending proposals, a review report."""
    settings = settings_for(data_dir)
    with Memory(settings) as mem:
        agent = mem.agent(AGENT)
        agent.set_identity("I am the support bot of Acme: patient, exact, and brief.")
        agent.facts.set("escalation_email", "help@acme.example")
        alice_turn = agent.record_turn(
            "alice", f"My locker code is {ALICE_CANARY}, remember it.", "Noted, Alice.", session_id="s-alice"
        ).event_id
        agent.record_turn(
            "bob", f"My locker code is {BOB_CANARY}, remember it.", "Noted, Bob.", session_id="s-bob"
        )
        agent.record_turn("carol", "Carol's note: canary-CAROL-5150.", "Noted, Carol.", session_id="s-carol")
    with EventLog(settings) as log:
        append_all(
            log,
            [
                episode(
                    AGENT,
                    "Alice locker",
                    f"Alice set her locker code {ALICE_CANARY}.",
                    participants=["alice"],
                    source_event_ids=[alice_turn],
                ),
                episode(AGENT, "Bob locker", f"Bob set his locker code {BOB_CANARY}.", participants=["bob"]),
            ],
        )
        pids = append_all(
            log,
            [
                proposal(
                    "Customers prefer refunds by bank transfer",
                    agent=AGENT,
                    minute=1,
                    confidence=0.4,
                    topic="refunds",
                    source_event_ids=[alice_turn],
                    evidence=[{"text": "My locker code is ...", "event_id": alice_turn}],
                ),
                proposal(
                    "Escalate outages to the on-call lead",
                    agent=AGENT,
                    minute=2,
                    confidence=0.4,
                    topic="outages",
                ),
                proposal(
                    "Invoices are sent monthly", agent=AGENT, minute=3, confidence=0.4, topic="invoices"
                ),
                proposal(
                    "Billing runs on the first day",
                    agent=OTHER_AGENT,
                    minute=4,
                    confidence=0.4,
                    topic="billing",
                ),
            ],
        )
        # Both facts about where Alice lives are hers (the correction cites her turn), so the
        # correction is decided against the Paris fact: proposals meet only facts with the same owners.
        (paris,) = append_all(
            log,
            [
                proposal(
                    "Alice lives in Paris",
                    agent=AGENT,
                    minute=5,
                    confidence=0.95,
                    topic="home",
                    participant="alice",
                )
            ],
        )
        home = append_all(
            log,
            [
                proposal(
                    "Alice lives in Berlin since October",
                    agent=AGENT,
                    minute=6,
                    confidence=0.4,
                    topic="home",
                    is_correction=True,
                    corrects=f"fact:{paris}",
                    participant="alice",
                    source_event_ids=[alice_turn],
                )
            ],
        )
    with Memory(settings) as mem:
        mem.evolve()
        agent = mem.agent(AGENT)
        # what alice's next turn was given: a recall, then the turn (the panel links them)
        agent.recall("locker code", "alice")
        agent.record_turn(
            "alice", "What was my locker code again?", f"It is {ALICE_CANARY}.", session_id="s-alice"
        )
        mem.review(day=at(0)[:10])
        mem.review()
    return Seeded(
        proposal_ids=pids[:3], other_proposal_id=pids[3], alice_turn=alice_turn, home_proposal_id=home[0]
    )


def cli_json(data_dir: Path, *args: str) -> Any:
    """Run `tiermem ... --json` in a subprocess (as a script would) and parse its output."""
    env = clean_env()
    done = subprocess.run(
        [sys.executable, "-m", "tiermem.app.cli", "--data-dir", str(data_dir), *args, "--json"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    return json.loads(done.stdout)
