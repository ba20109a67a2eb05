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
from apps.xiangqi.api import static_dir
from apps.xiangqi.games import GameService
from apps.xiangqi.store import GameStore

NODE = shutil.which("node") or shutil.which("nodejs")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

# A fake page: the elements board.js looks up, ``fetch`` from a route table, recorded calls.
PRELUDE = r"""
const TRANSFORMS = [];
class FakeElement {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.attrs = {}; this.style = {};
    this.listeners = {}; this.textContent = ""; this.className = ""; this.disabled = false;
    this.hidden = false; this.value = ""; this.scrollTop = 0; this.scrollHeight = 0;
    const classes = new Set();
    this.classList = { add: (c) => classes.add(c), remove: (c) => classes.delete(c),
                       contains: (c) => classes.has(c) };
    // every transform set on a piece, with the square it was drawn on: the slide of a move
    let transform = "";
    Object.defineProperty(this.style, "transform", {
      get: () => transform,
      set: (v) => { transform = v; TRANSFORMS.push([this.attrs["data-square"], v]); },
    });
  }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  getAttribute(k) { return k in this.attrs ? this.attrs[k] : null; }
  appendChild(c) { this.children.push(c); return c; }
  replaceChildren(...cs) { this.children = cs; }
  addEventListener(type, f) { (this.listeners[type] = this.listeners[type] || []).push(f); }
  querySelector(selector) {  // only [data-square="h2"], and only where a scenario asks for it
    const m = /^\[data-square="(\w+)"\]$/.exec(selector);
    if (!SCENARIO.findPieces || !m) return null;
    return this.children.find((c) => c.attrs["data-square"] === m[1]) || null;
  }
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
  const out = {};
  const layer = (id) => findById(PAGE.board, id).children;
  await (async () => { /*BODY*/ })();
  console.log(JSON.stringify({
    calls: CALLS, state, busy, error: PAGE.error.textContent, status: PAGE.status.textContent,
    out,
  }));
})();
"""


def run_board(tmp_path: Path, scenario: dict[str, Any], body: str = "") -> dict[str, Any]:
    """Run board.js against ``scenario`` (hash, routes, clicks, storageBlocked, findPieces); its
    outcome. ``body``: JavaScript run once the page has settled, with the script's own functions
    and variables in scope; what it puts in ``out`` comes back as ``["out"]``."""
    scenario = {"hash": "", "storageBlocked": False, "clicks": [], "findPieces": False,
                **scenario}
    script = "\n".join([
        f"const SCENARIO = {json.dumps(scenario)};",
        PRELUDE,
        (static_dir / "board.js").read_text(encoding="utf-8"),
        EPILOGUE.replace("/*BODY*/", body),
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
    assert out["calls"][1]["body"] == {"version": opened["version"]}
    assert out["calls"][2]["body"] == {"version": undone["version"]}
    assert out["state"]["version"] == replied["version"] and not out["state"]["model_to_move"]
    assert out["error"] == "" and not out["busy"]



def _service(tmp_path: Path) -> GameService:
    return GameService(GameStore(tmp_path / "g.sqlite3"), FirstMovePlayer())


def _get(game: dict[str, Any]) -> dict[str, list[list[Any]]]:
    """The route answering the page's GET of ``game`` (as often as it is asked)."""
    return {f"GET /api/xiangqi/games/{game['id']}": [[200, game]] * 5}


def test_a_click_selects_only_an_own_piece_and_marks_captures(tmp_path: Path) -> None:
    """Selecting the right cannon highlights its targets, a capture (h9, the horse behind the
    screen) drawn as a ring and a quiet move (e2) as a dot; a click on the selected piece lets
    it go; the opponent's piece is never selected, nor is a point the piece cannot reach; the
    first arrow key puts the keyboard's cursor on the selected piece. No request is sent."""
    game = _service(tmp_path).create(None, "black")
    res = run_board(tmp_path, {"hash": f"#{game['id']}", "routes": _get(game)}, """
        pickSquare("h2");
        out.selected = selected;
        out.selectedClass = layer("pieces").filter((p) => p.classList.contains("selected"))
          .map((p) => p.attrs["data-square"]);
        out.targets = Object.fromEntries(layer("targets").map(
          (t) => [t.attrs["data-target"], [t.attrs.class, Number(t.attrs.r)]]));
        onBoardKey({ key: "ArrowUp", preventDefault() {} });
        out.cursor = cursor;
        pickSquare("h2");
        out.again = selected;
        out.targetsAfter = layer("targets").length;
        pickSquare("h7");  // Black's cannon, Red to move
        out.enemy = selected;
        pickSquare("g3");
        pickSquare("g5");  // not a move of that soldier: lets it go
        out.illegal = selected;
    """)
    out = res["out"]
    assert out["selected"] == "h2" and out["selectedClass"] == ["h2"]
    assert out["targets"]["h9"] == ["target capture", 29]
    assert out["targets"]["e2"] == ["target", 9]
    assert out["cursor"] == "h2"
    assert out["again"] is None and out["targetsAfter"] == 0
    assert out["enemy"] is None and out["illegal"] is None
    assert [c["key"] for c in res["calls"]] == [f"GET /api/xiangqi/games/{game['id']}"]


def test_check_marks_the_general_in_check_and_the_last_move(tmp_path: Path) -> None:
    """Red's chariot checks Black's general along rank 9: the status says check, the black
    general (not the red one) is marked, the move's origin (i0) has the square mark and its
    target (i9) the ring; every piece is named for a screen reader."""
    service = _service(tmp_path)
    gid = service.create("4k4/9/9/9/9/9/9/9/9/3K4R w - - 0 1", "none")["id"]
    game = service.move(gid, "i0i9")
    assert game["check"] and game["turn"] == "black" and not game["over"]
    out = run_board(tmp_path, {"hash": f"#{gid}", "routes": _get(game)}, """
        out.statusClass = PAGE.status.className;
        out.inCheck = layer("pieces").filter((p) => p.classList.contains("in-check"))
          .map((p) => p.attrs["data-piece"]);
        const [from] = layer("marks").filter((m) => m.attrs.class === "mark-from");
        const [to] = layer("marks").filter((m) => m.attrs.class === "mark-last");
        out.from = [Number(from.attrs.x) + 24, Number(from.attrs.y) + 24];
        out.to = [Number(to.attrs.cx), Number(to.attrs.cy)];
        out.i0 = squarePoint("i0");
        out.i9 = squarePoint("i9");
        out.titles = layer("pieces").map((p) => p.children.find((c) => c.tagName === "title")
          ?.textContent).sort();
    """)
    assert out["status"] == "Black to move · check!"
    res = out["out"]
    assert res["statusClass"] == "status check"
    assert res["inCheck"] == ["k"]
    assert res["from"] == res["i0"] and res["to"] == res["i9"]
    assert res["titles"] == ["black general on e9", "red chariot on i9", "red general on d0"]


def test_the_moved_piece_slides_to_its_target(tmp_path: Path) -> None:
    """A move and the model's reply are animated: the piece drawn on the origin is moved
    (its transform) to the target before the new position is drawn. A click while the move is
    sent selects nothing (it would be left selected in the position after the reply)."""
    service = _service(tmp_path)
    game = service.create(None, "black")
    gid = game["id"]
    moved = service.move(gid, "h2e2")
    replied = service.model_move(gid, moved["version"])
    out = run_board(tmp_path, {
        "hash": f"#{gid}", "findPieces": True,
        "routes": {**_get(game), f"POST /api/xiangqi/games/{gid}/moves": [[200, moved]],
                   f"POST /api/xiangqi/games/{gid}/model-move": [[200, replied]]},
    }, """
        TRANSFORMS.length = 0;
        pickSquare("h2");
        pickSquare("e2");
        pickSquare("h0");  // while the move is sent: no selection taken
        out.pickedWhileBusy = selected;
        await running;
        const at = (sq) => { const [x, y] = squarePoint(sq); return `translate(${x}px, ${y}px)`; };
        out.slid = TRANSFORMS.filter(([sq, t]) => sq === "h2" && t === at("e2")).length;
        const reply = state.last_move;
        out.replySlid = TRANSFORMS.filter(
          ([sq, t]) => sq === reply.slice(0, 2) && t === at(reply.slice(2, 4))).length;
        out.reply = reply;
    """)
    assert out["state"]["version"] == replied["version"] and not out["busy"]
    assert out["out"] == {"pickedWhileBusy": None, "slid": 1, "replySlid": 1,
                          "reply": replied["last_move"]}


def test_a_game_that_starts_with_black_to_move_lists_black_first(tmp_path: Path) -> None:
    """A game from a FEN with Black to move: the first line of the move list holds a "…" in
    Red's place, then Black's move, so the columns stay Red, Black."""
    service = _service(tmp_path)
    gid = service.create("4k4/9/9/9/9/9/9/9/9/3K4R b - - 0 1", "none")["id"]
    game = service.move(gid, "e9f9")
    game = service.move(gid, "i0i1")
    out = run_board(tmp_path, {"hash": f"#{gid}", "routes": _get(game)}, """
        out.lines = PAGE.moves.children.map((li) => li.children.map((s) => s.textContent));
        out.classes = PAGE.moves.children.map((li) => li.children.map((s) => s.className));
    """)["out"]
    wxf = [m["wxf"] for m in game["moves"]]
    assert out["lines"] == [["…", wxf[0]], [wxf[1]]]
    assert out["classes"] == [["move red", "move black"], ["move red"]]


def test_the_human_side_is_drawn_at_the_bottom(tmp_path: Path) -> None:
    """The model plays Red: the board is flipped (Black, the human, at the bottom) and the
    "Model plays" box says Red, for a game opened by its link and for a new game; a game where
    the model plays Black is drawn the other way up again."""
    service = _service(tmp_path)
    red = service.create(None, "red")
    red = service.model_move(red["id"], red["version"])
    black = service.create(None, "black")
    fresh = service.create(None, "red")
    fresh_replied = service.model_move(fresh["id"], fresh["version"])
    out = run_board(tmp_path, {
        "hash": f"#{red['id']}",
        "routes": {**_get(red),
                   "POST /api/xiangqi/games": [[201, black], [201, fresh]],
                   f"POST /api/xiangqi/games/{fresh['id']}/model-move": [[200, fresh_replied]]},
    }, """
        out.linked = [flipped, PAGE["model-side"].value];
        PAGE["model-side"].value = "black";
        await PAGE["new-game"].listeners.click[0]();
        out.black = [flipped, state.id];
        PAGE["model-side"].value = "red";
        await PAGE["new-game"].listeners.click[0]();
        out.fresh = [flipped, state.moves.length];
    """)["out"]
    assert out["linked"] == [True, "red"]
    assert out["black"] == [False, black["id"]]
    assert out["fresh"] == [True, 1]
