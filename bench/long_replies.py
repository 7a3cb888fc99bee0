"""Long-reply conversations in the LoCoMo format: the agent writes 600-1,500 token replies, facts sit in short user turns.

    .venv/bin/python bench/long_replies.py --out /tmp/long_replies.json            # generate (deterministic)
    .venv/bin/python bench/bench_retrieval.py --data /tmp/long_replies.json --modes lexical --budgets 250 500 1000
    .venv/bin/python bench/long_replies.py --out /tmp/long_replies.json --check    # + the update check

An assistant that plans, codes and explains at length, and a user who states
short facts between its replies (a budget, a date, a name, a preference),
sometimes changing them later ("the budget is now ..."). The long replies
talk about the same topics as the facts (a remodel plan mentions the
kitchen and money on every page), so words alone rank them high; what a
question needs is the short user turn. Every question's evidence is that
turn; for a restated value, the newest statement (the stale one is the
trap). The generator is seeded: the same arguments give the same file.

`--check` also asks every update question and reports, per budget, how often
the new value is delivered, how often the stale one is delivered without it,
and how often search ranks the new statement above the stale one.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path
from typing import Any

import orjson

# (topic words for the long replies, fact statement, question, answer, restatement or None)
FACTS: list[tuple[str, str, str, str, str | None]] = [
    (
        "kitchen remodel budget cabinets contractor",
        "My budget for the kitchen remodel is $12,000.",
        "What is my budget for the kitchen remodel?",
        "$15,500",
        "Quick update: the kitchen remodel budget is now $15,500.",
    ),
    (
        "flight trip Osaka itinerary hotel",
        "I fly to Osaka on 14 March.",
        "When do I fly to Osaka?",
        "21 March",
        "Change of plan, I fly to Osaka on 21 March instead.",
    ),
    (
        "daughter school birthday party",
        "My daughter's name is Priya.",
        "What is my daughter's name?",
        "Priya",
        None,
    ),
    (
        "seat airline booking preference",
        "I always prefer a window seat.",
        "Which seat do I prefer on flights?",
        "aisle",
        "Actually I now prefer an aisle seat, my knee needs it.",
    ),
    (
        "manager team review meeting",
        "My manager is called Tomasz.",
        "What is my manager called?",
        "Tomasz",
        None,
    ),
    (
        "database migration postgres schema",
        "We run Postgres 14 in production.",
        "Which Postgres version do we run in production?",
        "16",
        "We upgraded production to Postgres 16 last night.",
    ),
    (
        "running marathon training plan",
        "My target marathon time is 4 hours 10 minutes.",
        "What is my target marathon time?",
        "3 hours 55 minutes",
        "New goal: my target marathon time is 3 hours 55 minutes.",
    ),
    (
        "garden vegetables soil watering",
        "I grow tomatoes and basil on the balcony.",
        "What do I grow on the balcony?",
        "tomatoes basil",
        None,
    ),
    (
        "car insurance renewal premium",
        "My car insurance renews on 2 September.",
        "When does my car insurance renew?",
        "2 September",
        None,
    ),
    (
        "rent apartment lease landlord",
        "My rent is 1,450 euros a month.",
        "How much is my rent?",
        "1,520 euros",
        "The landlord raised it: my rent is 1,520 euros a month now.",
    ),
    (
        "coffee machine espresso grinder",
        "I drink my espresso with oat milk.",
        "How do I take my espresso?",
        "oat milk",
        None,
    ),
    (
        "laptop keyboard setup monitor",
        "My laptop is a ThinkPad X1.",
        "What laptop do I use?",
        "ThinkPad X1",
        None,
    ),
]

# One more short user turn per topic, said after the second long reply: a question about the whole
# topic ("What have I told you about the kitchen?") needs it, the fact and any restatement.
DETAILS = {
    "kitchen": ("The kitchen contractor is called Ruiz.", "Ruiz"),
    "flight": ("For the flight I booked the hotel near Namba station.", "Namba"),
    "daughter": ("Her birthday party is at the climbing gym.", "climbing gym"),
    "seat": ("I fly with Lufthansa most of the time.", "Lufthansa"),
    "manager": ("Our review meeting is every second Thursday.", "Thursday"),
    "database": ("The database migration window is Sunday night.", "Sunday night"),
    "running": ("The marathon I am training for is in Valencia.", "Valencia"),
    "garden": ("I water the garden with a drip hose.", "drip hose"),
    "car": ("The car is a 2017 Skoda Octavia.", "Skoda Octavia"),
    "rent": ("The landlord is Mrs Okafor.", "Okafor"),
    "coffee": ("My grinder is a Baratza Encore.", "Baratza Encore"),
    "laptop": ("I use the laptop with a 27 inch monitor.", "27 inch"),
}

PARAGRAPHS = [
    "Let's break the {a} work into phases so nothing about the {b} gets lost. First, list what you already "
    "have, then what is missing, and finally what depends on what; the {c} usually constrains the order more "
    "than people expect, so we check it early and write the assumptions down.",
    "Here is a sketch of how I would structure it. Start with a small, reversible step for the {a}, measure "
    "the outcome, and only then commit to the {b}. If the {c} changes, the plan should bend, not break, so "
    "keep every decision in a short log with the date and the reason.",
    "A few risks to keep in mind: the {a} tends to take longer than estimated, the {b} has hidden costs, and "
    "the {c} may need a second opinion. None of these are blockers, but each deserves a line in the plan and "
    "an owner who checks it weekly.",
    "For the details, consider the following checklist: confirm the {a} requirements, compare at least three "
    "options for the {b}, collect quotes or benchmarks, and decide on the {c} with a clear rule for what "
    "would make you change your mind later.",
    "```python\ndef plan_{a}(items, limit):\n    chosen = []\n    for item in sorted(items, key=lambda i: i.cost):\n"
    "        if sum(i.cost for i in chosen) + item.cost <= limit:\n            chosen.append(item)  # {b}\n"
    "    return chosen  # {c}\n```\nThis greedy pass is a start; it keeps the cheapest items first.",
    "On timing: the {a} should come before the {b}, because changing the order later costs twice as much. "
    "Book the {c} as early as you can, and keep a buffer of a week or two for surprises that always come.",
    "To summarise the trade-offs, quality of the {a} versus speed of the {b} versus cost of the {c}: pick two. "
    "Most people in your situation choose quality and cost, and accept that it takes a little longer.",
]
SHORT_AGENT = ["Got it, noted.", "Thanks, I'll keep that in mind.", "Understood.", "Good to know!"]
SHORT_USER = ["Sounds good.", "Okay, let's do that.", "Makes sense, thanks.", "Can you go on?"]


def long_reply(rng: random.Random, topic: str, target_tokens: int) -> str:
    words = topic.split()
    out: list[str] = []
    while sum(len(p) for p in out) < target_tokens * 4:
        a, b, c = rng.sample(words, 3) if len(words) >= 3 else (words * 3)[:3]
        out.append(rng.choice(PARAGRAPHS).format(a=a, b=b, c=c))
    return "\n\n".join(out)


def conversation(rng: random.Random, idx: int, sessions: int) -> dict[str, Any]:
    facts = rng.sample(FACTS, 6)
    conv: dict[str, Any] = {"speaker_a": "Assistant", "speaker_b": "Dana"}
    qa: list[dict[str, Any]] = []
    updates: list[tuple[int, str, str]] = []  # (session it is restated in, fact statement, restatement)
    plan = {i: (k % sessions) + 1 for k, i in enumerate(range(len(facts)))}
    for fi, f in enumerate(facts):
        if f[4] is not None:
            updates.append((min(sessions, plan[fi] + 1 + rng.randint(0, 1)), f[1], f[4]))
    evidence: dict[str, str] = {}
    for s in range(1, sessions + 1):
        turns: list[dict[str, str]] = []

        def say(speaker: str, text: str, _turns: list[dict[str, str]] = turns, _s: int = s) -> str:
            dia = f"D{_s}:{len(_turns) + 1}"
            _turns.append({"speaker": speaker, "dia_id": dia, "text": text})
            return dia

        todays = [f for fi, f in enumerate(facts) if plan[fi] == s]
        restated = [(st, r) for (us, st, r) in updates if us == s]
        for f in todays:
            say("Dana", f"Can you help me plan the {f[0].split()[0]}?")
            say("Assistant", long_reply(rng, f[0], rng.randint(600, 1500)))
            evidence[f[1]] = say("Dana", f[1])
            say("Assistant", rng.choice(SHORT_AGENT))
            say("Assistant", long_reply(rng, f[0], rng.randint(600, 1500)))
            evidence["detail:" + f[0]] = say("Dana", DETAILS[f[0].split()[0]][0])
        for statement, restatement in restated:
            topic = next(f[0] for f in facts if f[1] == statement)
            say("Dana", f"Back to the {topic.split()[0]} for a moment.")
            say("Assistant", long_reply(rng, topic, rng.randint(600, 1500)))
            evidence[restatement] = say("Dana", restatement)
            say("Assistant", long_reply(rng, topic, rng.randint(600, 1500)))
        conv[f"session_{s}"] = turns
    # A closing small-talk session: the newest turns stay verbatim in working memory (not searched
    # by recall), so this keeps every fact above in the compressed, searchable archive.
    conv[f"session_{sessions + 1}"] = [
        {"speaker": sp, "dia_id": f"D{sessions + 1}:{k}", "text": rng.choice(SHORT_USER + SHORT_AGENT)}
        for k, sp in enumerate(["Dana", "Assistant"] * 6, start=1)
    ]
    for s in range(1, sessions + 2):  # one session a week
        day = 1 + 7 * (s - 1)
        month, dom = ("March", day) if day <= 31 else ("April", day - 31)
        conv[f"session_{s}_date_time"] = f"10:00 am on {dom} {month}, 2024"
    for f in facts:
        dia = evidence.get(f[4] or "") or evidence.get(f[1])
        if dia is None:
            continue
        qa.append(
            {
                "question": f[2],
                "answer": f[3],
                "evidence": [dia],
                "category": 4,
                "stale": f[1] if f[4] is not None else None,
                "stale_evidence": evidence.get(f[1]) if f[4] else None,
            }
        )
        topic = f[0].split()[0]
        dias = [
            d for d in (evidence.get(f[1]), evidence.get("detail:" + f[0]), evidence.get(f[4] or "")) if d
        ]
        answer = DETAILS[topic][1] + " " + f[3]
        qa.append(
            {
                "question": f"What have I told you about the {topic}?",
                "answer": answer,
                "evidence": dias,
                "category": 1,
                "stale": None,
                "stale_evidence": None,
            }
        )
    return {"sample_id": f"long-{idx}", "conversation": conv, "qa": qa}


def generate(n: int, sessions: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [conversation(rng, i, sessions) for i in range(n)]


def check_updates(data: Path, budgets: list[int]) -> dict[str, Any]:
    """Per budget: the new value delivered / the stale one delivered without the new / new ranked above stale."""
    import tempfile
    from dataclasses import replace

    from tiermem.runtime.quote_search import search_quotes

    from tiermem.app.locomo import TiermemContext, load_locomo, prepare
    from tiermem.settings import resolve_settings

    raw = orjson.loads(data.read_bytes())
    convs = load_locomo(data)
    out: dict[str, Any] = {str(b): {"new": 0, "stale_only": 0} for b in budgets}
    ranked_first = asked = 0
    with tempfile.TemporaryDirectory() as tmp:
        settings = replace(
            resolve_settings(data_dir=Path(tmp) / "data", env={}), anthropic_api_key=None, fsync="none"
        )
        prepare(settings, convs)
        for sample, conv in zip(raw, convs, strict=True):
            ctx = TiermemContext(settings, conv)
            texts = {t.dia_id: t.text for t in conv.turns}
            try:
                for q in sample["qa"]:
                    if not q.get("stale"):
                        continue
                    asked += 1
                    new_text, stale_text = texts[q["evidence"][0]], q["stale"]
                    found = [
                        x["text"] for x in search_quotes(ctx.memory.conn, ctx.memory.principal, q["question"])
                    ]
                    if new_text in found and (
                        stale_text not in found or found.index(new_text) < found.index(stale_text)
                    ):
                        ranked_first += 1
                    for b in budgets:
                        shown = "\n".join(i.text for i in ctx.deliver(q["question"], b))
                        out[str(b)]["new"] += new_text in shown
                        out[str(b)]["stale_only"] += stale_text in shown and new_text not in shown
            finally:
                ctx.close()
    return {"update_questions": asked, "new_ranked_above_stale": ranked_first, "per_budget": out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--conversations", type=int, default=8)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--seed", type=int, default=15)
    ap.add_argument("--check", action="store_true", help="also run the update check on the generated file")
    ap.add_argument("--budgets", nargs="+", type=int, default=[250, 500, 1000])
    args = ap.parse_args()
    args.out.write_bytes(orjson.dumps(generate(args.conversations, args.sessions, args.seed)))
    print(f"wrote {args.out}", file=sys.stderr)
    if args.check:
        sys.stdout.write(
            orjson.dumps(check_updates(args.out, args.budgets), option=orjson.OPT_INDENT_2).decode() + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
