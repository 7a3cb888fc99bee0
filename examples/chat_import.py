"""Import a chat export into tiermem, compress it into episodes, then ask what the agent remembers.

    python examples/chat_import.py                        # the bundled sample, in a fresh data root
    python examples/chat_import.py my_export.json --data-dir ./data \\
        --ask "anniversary trip to Lisbon" --participant alice

The chat export format (`tiermem-chat-export/1`, one JSON file):

    {
      "format": "tiermem-chat-export/1",
      "agent": "travel-bot",                      # the agent these chats belong to
      "conversations": [
        {
          "id": "conv-0302-alice",                # becomes the session id
          "participant": "alice",                 # the person the agent talked to
          "channel": "web",                       # optional
          "messages": [
            {"role": "user", "ts": "2026-03-02T09:00:00Z", "text": "..."},
            {"role": "assistant", "ts": "2026-03-02T09:01:00Z", "text": "..."}
          ]
        }
      ]
    }

Each user message and the assistant messages after it become one `interaction`
(consecutive messages of one role are joined); the turn takes the user
message's timestamp. Re-importing the same export adds nothing (the ids come
from the file's bytes). Offline this uses the deterministic scorer; with
ANTHROPIC_API_KEY set, the compressor scores with Claude.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tiermem import Memory

HERE = Path(__file__).resolve().parent
SAMPLE = HERE / "data" / "chat_export.json"
FORMAT = "tiermem-chat-export/1"
SAMPLE_QUESTIONS = [
    ("anniversary trip to Lisbon, seats and meals", "alice"),
    ("lost passport and the Tokyo hotel", "bob"),
]


class ExportError(Exception):
    """The file is not a chat export this script understands."""


def _exchanges(messages: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    """(ts, user text, assistant text) for each user message and the replies after it."""
    ts = ""
    asked: list[str] = []
    replies: list[str] = []
    for m in messages:
        role, text = m.get("role"), str(m.get("text") or "").strip()
        if role == "user":
            if replies:
                yield ts, "\n".join(asked), "\n".join(replies)
                asked, replies = [], []
            if not asked:
                ts = str(m.get("ts") or "")
            asked.append(text)
        elif role == "assistant" and asked:
            replies.append(text)
    if asked:
        yield ts, "\n".join(asked), "\n".join(replies)


def to_interactions(export: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The export's conversations as tiermem `interaction` records."""
    if export.get("format") != FORMAT or not isinstance(export.get("conversations"), list):
        raise ExportError(f"expected a JSON object with format {FORMAT!r} and a conversations list")
    agent = export.get("agent") or "imported-agent"
    for conv in export["conversations"]:
        for ts, question, answer in _exchanges(conv.get("messages") or []):
            record = {
                "type": "interaction",
                "agent_id": agent,
                "user": conv.get("participant"),
                "session_id": conv.get("id"),
                "channel": conv.get("channel"),
                "ts": ts or None,
                "user_message": question,
                "agent_response": answer,
                "metadata": {"imported_from": FORMAT},
            }
            yield {k: v for k, v in record.items() if v is not None}


def convert(export_path: Path, out: Path) -> tuple[str, int]:
    """Write the export as a JSONL file of interactions; (agent id, number of turns)."""
    try:
        export = orjson.loads(export_path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ExportError(f"{export_path}: {exc}") from None
    if not isinstance(export, dict):
        raise ExportError(f"{export_path}: expected a JSON object")
    records = list(to_interactions(export))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return str(export.get("agent") or "imported-agent"), len(records)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("export", nargs="?", default=str(SAMPLE), help="a tiermem-chat-export/1 JSON file")
    parser.add_argument("--data-dir", help="tiermem data root (default: a fresh temporary one)")
    parser.add_argument("--ask", help="what to recall (default: two sample questions)")
    parser.add_argument("--participant", help="only memories with this person")
    args = parser.parse_args(argv)
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="tiermem-chat-import-"))

    with Memory.open(data_dir) as mem:
        turns_file = data_dir / "imports" / (Path(args.export).stem + ".jsonl")
        try:
            agent_id, n = convert(Path(args.export), turns_file)
        except ExportError as exc:
            print(f"chat_import: {exc}", file=sys.stderr)
            return 2
        print(f"converted {n} exchanges of {agent_id} from {args.export} -> {turns_file}")

        ingested = mem.ingest(turns_file)
        print(f"ingested: {ingested.accepted} new, {ingested.duplicates} already in the log")
        compressed = mem.compress(agent_id)
        print(
            f"compressed {compressed.interactions_scored} older turns into {compressed.episodes} episodes "
            f"({compressed.scorer} scorer); the newest stay verbatim in working memory"
        )

        agent = mem.agent(agent_id)
        questions = [(args.ask, args.participant)] if args.ask else SAMPLE_QUESTIONS
        for query, participant in questions:
            found = agent.recall(query, participant)
            who = f" (with {participant})" if participant else ""
            print(f"\nrecall {query!r}{who}: {len(found.episodes)} episode(s)")
            for ep in found.episodes:
                print(f"  {ep.name}  (importance {ep.importance}, score {ep.score:.2f})")
                print(f"    {ep.summary}")
                for quote in ep.quotes[:3]:
                    print(f'    "{quote}"')
        print(f"\ndata root: {data_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
