"""The web board's script (apps/xiangqi/static/board.js) in Node with a minimal fake DOM.

No browser: the page's elements are stand-ins that record what the script does, and ``fetch``
answers from game states the real :class:`GameService` produced. This covers start-up and
button paths the Chromium test (test_xiangqi_browser.py) does not: storage that is blocked, and
an undo that leaves the model to move.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from apps.xiangqi import Board, Move
from apps.xiangqi.api import GameService, static_dir
from apps.xiangqi.store import GameStore

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

# A fake page: the elements board.js looks up, ``fetch`` from a route table, recorded calls.
PRELUDE = r"""
class FakeElement {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.attrs = {}; this.style = {};
    this.listeners = {}; this.textContent = ""; this.className = ""; this.disabled = false;
    this.hidden = false; this.value = ""; this.scrollTop = 0; this.scrollHeight = 0;
    const classes = new Set();
    this.classList = { add: (c) => classes.add(c), remove: (c) => classes.delete(c) };
  }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener(type, f) { (this.listeners[type] = this.listeners[type] || []).push(f); }
  querySelector() { return null; }
  getBoundingClientRect() { return { x: 0, y: 0, width: 0, height: 0 }; }
  getContext() {
    return { clearRect() {}, fillText() {}, getImageData: () => ({ data: [0, 0, 0, 0] }) };
  }
}
function findById(node, id) {
  if (node.attrs.id === id) return node;
  for (const c of node.children) { const f = findById(c, id); if (f) return f; }
  return null;
}
const PAGE = {};
for (const id of ["board", "status", "moves", "undo", "model-move", "new-game", "flip",
                  "model-side", "fen", "error", "game-id"]) PAGE[id] = new FakeElement(id);
globalThis.document = {
  getElementById: (id) => PAGE[id] || findById(PAGE.board, id),
  createElement: (tag) => new FakeElement(tag),
  createElementNS: (_, tag) => new FakeElement(tag),
};
globalThis.window = { addEventListener() {} };
globalThis.location = { search: "", hash: SCENARIO.hash };
globalThis.history = { replaceState: (_, __, url) => { location.hash = url; } };
const stored = new Map();
Object.defineProperty(globalThis, "localStorage", {
  configurable: true,
  get() {
    if (SCENARIO.storageBlocked) {
      throw new Error("SecurityError: access to localStorage is denied for this document");
    }
    return { getItem: (k) => (stored.has(k) ? stored.get(k) : null),
             setItem: (k, v) => stored.set(k, String(v)) };
  },
});
const CALLS = [];
globalThis.fetch = async (url, init) => {
  const key = `${init.method} ${url}`;
  CALLS.push({ key, body: init.body ? JSON.parse(init.body) : null });
  const answer = SCENARIO.routes[key];
  if (!answer) throw new Error(`unexpected request ${key}`);
  const [status, body] = answer.shift();
  return { ok: status < 400, status, json: async () => body };
};
"""

EPILOGUE = r"""
const settle = async () => {
  for (let i = 0; i < 100; i++) await new Promise((r) => setTimeout(r, 0));
};
(async () => {
  await settle();
  for (const id of SCENARIO.clicks) {
    await PAGE[id].listeners.click[0]();
    await settle();
  }
  console.log(JSON.stringify({
    calls: CALLS, state, busy, error: PAGE.error.textContent, status: PAGE.status.textContent,
  }));
})();
"""


def run_board(tmp_path: Path, scenario: dict[str, Any]) -> dict[str, Any]:
    """Run board.js against ``scenario`` (hash, routes, clicks, storageBlocked); its outcome."""
    script = "\n".join([
        f"const SCENARIO = {json.dumps(scenario)};",
        PRELUDE,
        (static_dir / "board.js").read_text(encoding="utf-8"),
        EPILOGUE,
    ])
    path = tmp_path / "board_harness.js"
    path.write_text(script, encoding="utf-8")
    assert NODE is not None
    done = subprocess.run([NODE, str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


class FirstMovePlayer:
    def choose(self, board: Board) -> Move:
        return board.legal_moves[0]


def test_board_starts_when_storage_is_blocked(tmp_path: Path) -> None:
    """Reading localStorage throws where site data is blocked: the board still starts a game."""
    service = GameService(GameStore(tmp_path / "g.sqlite3"), FirstMovePlayer())
    game = service.create(None, "black")
    out = run_board(tmp_path, {
        "hash": "", "storageBlocked": True, "clicks": [],
        "routes": {"POST /api/xiangqi/games": [[201, game]]},
    })
    assert [c["key"] for c in out["calls"]] == ["POST /api/xiangqi/games"]
    assert out["state"]["id"] == game["id"] and not out["busy"] and out["error"] == ""
    assert out["status"].startswith("Red to move")


def test_undo_that_leaves_the_model_to_move_lets_it_play(tmp_path: Path) -> None:
    """The model (Red) opened; undo takes that move back, so the model is to move again: the
    board asks for its move, as it does on a new game or a reload, instead of stalling."""
    service = GameService(GameStore(tmp_path / "g.sqlite3"), FirstMovePlayer())
    gid = service.create(None, "red")["id"]
    opened = service.model_move(gid)
    undone = service.undo(gid, opened["version"])
    assert undone["moves"] == [] and undone["model_to_move"]
    replied = service.model_move(gid, undone["version"])
    out = run_board(tmp_path, {
        "hash": f"#{gid}", "storageBlocked": False, "clicks": ["undo"],
        "routes": {
            f"GET /api/xiangqi/games/{gid}": [[200, opened]],
            f"POST /api/xiangqi/games/{gid}/undo": [[200, undone]],
            f"POST /api/xiangqi/games/{gid}/model-move": [[200, replied]],
        },
    })
    assert [c["key"] for c in out["calls"]] == [
        f"GET /api/xiangqi/games/{gid}",
        f"POST /api/xiangqi/games/{gid}/undo",
        f"POST /api/xiangqi/games/{gid}/model-move",
    ]
    assert out["calls"][2]["body"] == {"version": undone["version"]}
    assert out["state"]["version"] == replied["version"] and not out["state"]["model_to_move"]
    assert out["error"] == "" and not out["busy"]
