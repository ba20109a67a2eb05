// Xiangqi web board: draws the position in SVG from the game API's state and plays moves by
// clicks. No build step, no dependencies. Squares use ICCS names: files a-i from Red's left,
// ranks 0-9 from Red's side (so Red's general starts on e0).
"use strict";

const API = "/api/xiangqi/games";
const SVG_NS = "http://www.w3.org/2000/svg";
const M = 50; // margin around the grid, in SVG units
const C = 60; // distance between two lines
const FILES = "abcdefghi";
const ANIMATION_MS = 380;

// Traditional characters: red 帥仕相傌俥炮兵, black 將士象馬車砲卒 (Pikafish FEN letters).
const GLYPHS = {
  K: "帥", A: "仕", B: "相", N: "傌", R: "俥", C: "炮", P: "兵",
  k: "將", a: "士", b: "象", n: "馬", r: "車", c: "砲", p: "卒",
};
const NAMES = {
  k: "general", a: "advisor", b: "elephant", n: "horse", r: "chariot", c: "cannon", p: "soldier",
};

// Without a CJK font every character draws as the same empty box: then (or with ?letters in the
// URL, for readers who prefer them) pieces show their FEN letters and the river its pinyin.
function cjkFontMissing() {
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 40;
  // read back twice: without willReadFrequently Chrome logs a console warning about it
  const ctx = canvas.getContext("2d", { willReadFrequently: true });
  const draw = (ch) => {
    ctx.clearRect(0, 0, 40, 40);
    ctx.font = "32px serif";
    ctx.fillText(ch, 2, 34);
    return ctx.getImageData(0, 0, 40, 40).data.join(",");
  };
  return draw("帥") === draw("將");
}
const LETTERS = new URLSearchParams(location.search).has("letters") || cjkFontMissing();
const RIVER = LETTERS ? ["Chu He", "Han Jie"] : ["楚 河", "漢 界"];
const glyph = (letter) => (LETTERS ? letter.toUpperCase() : GLYPHS[letter]);

const el = (id) => document.getElementById(id);
const svg = el("board");
let state = null; // the last game state from the API
let selected = null; // the selected square, e.g. "h2"
let flipped = false;
let busy = false;
let thinking = false; // a model move is being asked for: the status says so until it answers
let asking = null; // that request's AbortController: New game abandons it (the reply is stale)
let running = Promise.resolve(); // the request run() has in progress, settled once it ended
let following = 0; // bumped to stop an older watch of a game another request is changing
let watching = false; // such a watch runs: the status says so, Undo and Model move wait for it
let wanted = null; // a game id put in the URL while a request ran, opened when it ends
let cursor = null; // the square the keyboard points at (null until an arrow key is pressed)

function svgEl(tag, attrs, parent) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

// Board square (file 0-8, rank 0-9) to SVG point; Red sits at the bottom unless flipped.
function point(file, rank) {
  const f = flipped ? 8 - file : file;
  const r = flipped ? rank : 9 - rank;
  return [M + f * C, M + r * C];
}

function squarePoint(name) {
  return point(FILES.indexOf(name[0]), Number(name[1]));
}

// ---- drawing -------------------------------------------------------------------------------

function drawGrid() {
  svg.replaceChildren();
  const g = svgEl("g", { class: "grid" }, svg);
  svgEl("rect", {
    x: M - 8, y: M - 8, width: 8 * C + 16, height: 9 * C + 16, class: "frame",
    fill: "none", stroke: "#5b3a1a", "stroke-width": 3.5,
  }, g);
  const line = (x1, y1, x2, y2) => svgEl("line", { x1, y1, x2, y2 }, g);
  for (let r = 0; r < 10; r++) line(M, M + r * C, M + 8 * C, M + r * C);
  for (let f = 0; f < 9; f++) {
    const x = M + f * C;
    if (f === 0 || f === 8) {
      line(x, M, x, M + 9 * C);
    } else { // the river cuts every inner file
      line(x, M, x, M + 4 * C);
      line(x, M + 5 * C, x, M + 9 * C);
    }
  }
  // Palaces: the 3x3 squares around each general, with both diagonals.
  for (const top of [0, 7]) {
    line(M + 3 * C, M + top * C, M + 5 * C, M + (top + 2) * C);
    line(M + 5 * C, M + top * C, M + 3 * C, M + (top + 2) * C);
  }
  // Position marks where cannons and soldiers start.
  const marks = [[1, 2], [7, 2], [1, 7], [7, 7]];
  for (const f of [0, 2, 4, 6, 8]) marks.push([f, 3], [f, 6]);
  for (const [f, r] of marks) {
    const x = M + f * C;
    const y = M + (9 - r) * C;
    for (const dx of [-1, 1]) {
      if ((f === 0 && dx < 0) || (f === 8 && dx > 0)) continue;
      for (const dy of [-1, 1]) {
        const x0 = x + dx * 5;
        const y0 = y + dy * 5;
        svgEl("polyline", {
          points: `${x0 + dx * 10},${y0} ${x0},${y0} ${x0},${y0 + dy * 10}`,
        }, g);
      }
    }
  }
  const riverY = M + 4.5 * C;
  svgEl("text", { x: M + 2 * C, y: riverY, class: "river", "text-anchor": "middle",
    "dominant-baseline": "central" }, g).textContent = RIVER[0];
  svgEl("text", { x: M + 6 * C, y: riverY, class: "river", "text-anchor": "middle",
    "dominant-baseline": "central" }, g).textContent = RIVER[1];
  // ICCS coordinates: files along the bottom, ranks on the left.
  for (let f = 0; f < 9; f++) {
    const [x] = point(f, 0);
    svgEl("text", { x, y: M + 9 * C + 36, class: "coord", "text-anchor": "middle" }, g)
      .textContent = FILES[f];
  }
  for (let r = 0; r < 10; r++) {
    const [, y] = point(0, r);
    svgEl("text", { x: 8, y: y + 4, class: "coord" }, g).textContent = String(r);
  }
  svgEl("g", { id: "marks" }, svg);
  svgEl("g", { id: "pieces" }, svg);
  svgEl("g", { id: "targets" }, svg);
  svgEl("g", { id: "cursor" }, svg);
}

// FEN board field to {square: letter}; the first row is rank 9.
function parseFen(fen) {
  const pieces = {};
  const rows = fen.split(" ")[0].split("/");
  rows.forEach((row, i) => {
    const rank = 9 - i;
    let file = 0;
    for (const ch of row) {
      if (/\d/.test(ch)) {
        file += Number(ch);
      } else {
        pieces[FILES[file] + rank] = ch;
        file += 1;
      }
    }
  });
  return pieces;
}

function isRed(letter) {
  return letter === letter.toUpperCase();
}

function drawPieces(fen) {
  const layer = el("pieces");
  layer.replaceChildren();
  const pieces = parseFen(fen);
  const checked = state && state.check ? (state.turn === "red" ? "K" : "k") : null;
  for (const [sq, letter] of Object.entries(pieces)) {
    const [x, y] = squarePoint(sq);
    const side = isRed(letter) ? "red" : "black";
    const g = svgEl("g", {
      class: `piece ${side}`, "data-square": sq, "data-piece": letter,
    }, layer);
    g.style.transform = `translate(${x}px, ${y}px)`;
    if (letter === checked) g.classList.add("in-check");
    if (sq === selected) g.classList.add("selected");
    svgEl("circle", { r: 27, class: "disc" }, g);
    svgEl("circle", { r: 22, class: "ring" }, g);
    svgEl("text", { x: 0, y: 1 }, g).textContent = glyph(letter);
    svgEl("title", {}, g).textContent = `${side} ${NAMES[letter.toLowerCase()]} on ${sq}`;
  }
}

function drawMarks() {
  const layer = el("marks");
  layer.replaceChildren();
  const last = state && state.last_move;
  if (!last) return;
  const [fx, fy] = squarePoint(last.slice(0, 2));
  const [tx, ty] = squarePoint(last.slice(2, 4));
  svgEl("rect", { x: fx - 24, y: fy - 24, width: 48, height: 48, rx: 8, class: "mark-from" },
    layer);
  svgEl("circle", { cx: tx, cy: ty, r: 33, class: "mark-last" }, layer);
}

function targetsOf(square) {
  if (!state || !square) return [];
  return state.legal_moves.filter((m) => m.slice(0, 2) === square).map((m) => m.slice(2, 4));
}

function drawTargets() {
  const layer = el("targets");
  layer.replaceChildren();
  const pieces = state ? parseFen(state.fen) : {};
  for (const sq of targetsOf(selected)) {
    const [x, y] = squarePoint(sq);
    const capture = sq in pieces;
    svgEl("circle", {
      cx: x, cy: y, r: capture ? 29 : 9, class: capture ? "target capture" : "target",
      "data-target": sq,
    }, layer);
  }
}

// The keyboard's cursor: a square outline where Enter or Space acts, drawn once a key moved it.
function drawCursor() {
  const layer = el("cursor");
  if (!layer) return;
  layer.replaceChildren();
  if (!cursor) return;
  const [x, y] = squarePoint(cursor);
  svgEl("rect", { x: x - 30, y: y - 30, width: 60, height: 60, rx: 6, class: "cursor",
    "data-cursor": cursor }, layer);
}

function render() {
  drawGrid();
  if (!state) return;
  drawMarks();
  drawPieces(state.fen);
  drawTargets();
  drawCursor();
  describeBoard();
  renderStatus();
  renderMoves();
  renderButtons();
  el("game-id").textContent = state.id;
}

// How a finished game ended, in words: the API's reason ("draw_repetition" read "Draw by draw
// repetition", "repetition" did not say that the loser is the side that checked perpetually).
function resultText(s) {
  const reasons = {
    checkmate: "checkmate",
    stalemate: "stalemate (no legal move)",
    draw_repetition: "repetition",
    no_capture_120: "the 120-ply no-capture rule",
  };
  let how;
  if (s.reason === "repetition" && s.winner) {
    how = `perpetual check by ${sideName(s.winner === "red" ? "black" : "red")}`;
  } else {
    how = reasons[s.reason] || String(s.reason || "").replaceAll("_", " ");
  }
  const winner = s.winner ? `${sideName(s.winner)} wins` : "Draw";
  return `${winner} by ${how} (${s.result})`;
}

function sideName(side) {
  return side === "red" ? "Red" : "Black";
}

function renderStatus() {
  const [text, kind] = statusLine();
  const status = el("status");
  // Only a change is written: the line is a live region, and a screen reader reads it out again
  // whenever its text is replaced, even by the same words (every click redraws the board).
  if (status.textContent !== text) status.textContent = text;
  const className = kind ? `status ${kind}` : "status";
  if (status.className !== className) status.className = className;
}

// The status line's text and its class (failed, over, check, thinking or "").
function statusLine() {
  if (!state) { // the first load failed (the reason is under the controls): say so, not "Loading…"
    return ["No game loaded · New game or a reload tries again", "failed"];
  }
  if (state.over) return [resultText(state), "over"];
  let text = `${sideName(state.turn)} to move`;
  const kinds = [];
  if (state.check) {
    text += " · check!";
    kinds.push("check");
  }
  if (thinking) {
    text += " · the model is thinking";
    kinds.push("thinking");
  } else if (watching) {
    text += " · another request is changing the game (the model may be thinking for it)";
    kinds.push("thinking");
  } else if (state.model_to_move) {
    text += " · model's turn";
  } else if (state.model_side !== "none") {
    text += " · your move";
  }
  return [text, kinds.join(" ")];
}

// One line per full move: Red's move, then Black's (a game may start with Black to move).
function renderMoves() {
  const list = el("moves");
  list.replaceChildren();
  let li = null;
  for (const m of state.moves) {
    if (!li || m.side === "red") {
      li = document.createElement("li");
      list.appendChild(li);
      if (m.side === "black") li.appendChild(moveSpan({ wxf: "…", iccs: "", side: "red" }));
    }
    li.appendChild(moveSpan(m));
  }
  list.scrollTop = list.scrollHeight;
}

function moveSpan(m) {
  const span = document.createElement("span");
  span.className = `move ${m.side}` + (m.by === "model" ? " model" : "");
  span.textContent = m.wxf;
  if (m.iccs) span.title = `${m.iccs}: ${m.side}, played by ${m.by}`;
  return span;
}

function renderButtons() {
  el("undo").disabled = busy || watching || !state || state.moves.length === 0;
  el("model-move").disabled = busy || watching || !state || state.over ||
    !(state.model_to_move || state.model_side === "none");
  // usable while the model thinks (a first model load can take minutes): it abandons that game
  el("new-game").disabled = busy && !thinking;
}

// Slide the moved piece from its square to the target, then show the new state.
function animateTo(next) {
  const move = next.last_move;
  const grew = state && next.moves.length === state.moves.length + 1;
  if (!move || !grew) {
    state = next;
    render();
    return Promise.resolve();
  }
  const piece = el("pieces").querySelector(`[data-square="${move.slice(0, 2)}"]`);
  if (!piece) {
    state = next;
    render();
    return Promise.resolve();
  }
  el("targets").replaceChildren();
  const [x, y] = squarePoint(move.slice(2, 4));
  el("pieces").appendChild(piece); // on top of the piece it may capture
  piece.getBoundingClientRect(); // commit the start position so the transition runs
  piece.style.transform = `translate(${x}px, ${y}px)`;
  return new Promise((resolve) => {
    setTimeout(() => {
      state = next;
      render();
      resolve();
    }, ANIMATION_MS);
  });
}

// ---- API -----------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    // a body that is not the API's (a proxy's HTML page) still says what answered
    super(err.message || `the server answered HTTP ${status}`);
    this.status = status;
    this.type = err.type;
    this.field = err.field;
  }
}

// `signal` aborts the request: the AbortError is thrown as it is, not as a failed request.
async function api(method, path, body, signal) {
  const init = { method, headers: {}, signal };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(API + path, init);
  } catch (err) { // no answer at all: the server is stopped or the network is down
    if (signal && signal.aborted) throw err;
    throw new ApiError(0, { error: { message: "cannot reach the server " +
      `(${err.message || err}); is it running? Try again once it is.` } });
  }
  let data = null;
  try {
    data = await res.json();
  } catch (_) {
    data = null;
  }
  if (signal && signal.aborted) throw new DOMException("the request was abandoned", "AbortError");
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

function showError(message) {
  const box = el("error");
  box.textContent = message || "";
  box.hidden = !message;
  // at phone size the box is under the controls, below the board: bring it on screen
  if (message) box.scrollIntoView({ block: "nearest" });
}

// `keepError`: the message shown stays (it says why this run was started)
async function run(task, keepError = false) {
  if (busy) return;
  running = runNow(task, keepError);
  await running;
}

async function runNow(task, keepError) {
  busy = true;
  following += 1; // this page changes the game now: stop watching it
  watching = false;
  renderButtons();
  if (!keepError) showError("");
  let askAfter = false; // the game read again has moved on and leaves the model to move
  try {
    await task();
  } catch (err) {
    if (err.name === "AbortError") return; // abandoned for a new game, which is shown next
    showError(err.message);
    thinking = false;
    selected = null;
    // 409: someone else changed the game. No answer, or a 5xx (a proxy's 504, a server cut off):
    // the change may have been made all the same. Either way, show the game as it is now.
    if (state && (err.status === 409 || err.status === 0 || err.status >= 500)) {
      let reread = false;
      let changed = false;
      try {
        const next = await api("GET", `/${state.id}`);
        changed = next.version !== state.version;
        state = next;
        reread = true;
      } catch (_) { /* keep the old view */ }
      if (changed && err.status !== 409) {
        showError(`${err.message} (the game has changed on the server all the same: it is ` +
          "shown as it is now)");
      }
      // as on a reload: the model plays now if the game read again leaves it to move
      askAfter = changed && state.model_to_move && !state.over;
      if (err.type === "conflict" && reread) {
        // the API's advice is to reload: this page has read the game again already
        showError("This game was changed in another tab or window; it is shown here as it is " +
          "now.");
      } else if (err.type === "game_busy" && changed) {
        showError(""); // the other request has ended already: its change is shown
      } else if (err.type === "game_busy") {
        // the API's advice is to reload; this page reads the game again by itself
        showError("Another request is changing this game; it is shown here once it has.");
        follow(state.id, state.version);
      }
    }
    // Redraw in every case: no "thinking" status, selection or targets left from the failed try.
    render();
  } finally {
    thinking = false;
    busy = false;
    renderButtons();
    renderStatus();
    if (wanted) { // a game asked for in the URL while this request ran: open it now
      const id = wanted;
      wanted = null;
      setTimeout(() => openGame(id));
    } else if (askAfter) {
      setTimeout(() => run(modelReplyIfDue, true));
    }
  }
}

// Another request (another tab, the model thinking for it) is changing this game: read it again
// every second until its version moves on, then show it, so the board does not stay behind.
// `clear`: the error shown is about this wait (game_busy), and goes once the game is shown.
async function follow(id, version, clear = true) {
  const mine = ++following;
  watching = true;
  try {
    await watch(mine, id, version, clear);
  } finally {
    if (mine === following) {
      watching = false;
      if (state) {
        renderStatus();
        renderButtons();
      }
    }
  }
}

async function watch(mine, id, version, clear) {
  for (let i = 0; i < 120; i++) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    if (mine !== following || busy || !state || state.id !== id) return;
    let next;
    try {
      next = await api("GET", `/${id}`);
    } catch (_) {
      continue;
    }
    if (mine !== following || busy || !state || state.id !== id) return;
    if (next.version !== version) {
      state = next;
      selected = null; // a piece picked in the old position must not move in the new one
      if (clear) showError("");
      render();
      // the change (another tab's move) leaves the model to move: it plays, as on a reload
      if (state.model_to_move && !state.over) setTimeout(() => run(modelReplyIfDue));
      return;
    }
  }
}

async function askModel() {
  thinking = true;
  asking = new AbortController();
  renderStatus();
  renderButtons();
  let next;
  try {
    next = await api("POST", `/${state.id}/model-move`, { version: state.version },
      asking.signal);
  } finally {
    asking = null;
  }
  thinking = false;
  renderButtons();
  await animateTo(next);
}

async function modelReplyIfDue() {
  if (!state || state.over || !state.model_to_move) return;
  await askModel();
}

function remember(id) {
  history.replaceState(null, "", `#${id}`);
  try {
    localStorage.setItem("xiangqi.game", id);
  } catch (_) { /* private mode */ }
}

// The last game's id, or null where storage is blocked (reading localStorage then throws, or it
// is null): the board must still start.
function rememberedGame() {
  try {
    return localStorage.getItem("xiangqi.game");
  } catch (_) {
    return null;
  }
}

async function newGame() {
  const body = { model_side: el("model-side").value };
  // only while its box is open: a FEN typed once and folded away must not start every game
  const fen = el("fen-box")?.open ? el("fen").value.trim() : "";
  if (fen) body.fen = fen;
  state = await api("POST", "", body);
  selected = null;
  flipped = state.model_side === "red"; // the human's side at the bottom
  remember(state.id);
  render();
  await modelReplyIfDue();
}

async function loadGame(id) {
  state = await api("GET", `/${encodeURIComponent(id)}`);
  selected = null; // a piece picked in the game shown before must not move in this one
  flipped = state.model_side === "red";
  el("model-side").value = state.model_side;
  remember(state.id);
  render();
  await modelReplyIfDue();
}

// A game id edited into the URL (#id): open it, unless it is the game shown. If it cannot be
// opened, the error says why and the URL goes back to the game still shown.
function openGame(id) {
  if (!id || (state && state.id === id)) {
    wanted = null; // edited back to the game shown while a request ran: open nothing after it
    return;
  }
  if (busy) {
    wanted = id;
    return;
  }
  run(async () => {
    try {
      await loadGame(id);
    } catch (err) {
      if (state) remember(state.id);
      throw err;
    }
  });
}

async function playMove(from, to) {
  selected = null;
  const next = await api("POST", `/${state.id}/moves`, {
    move: from + to, version: state.version,
  });
  await animateTo(next);
  await modelReplyIfDue();
}

// ---- input ---------------------------------------------------------------------------------

function squareAt(evt) {
  const pt = svg.createSVGPoint();
  pt.x = evt.clientX;
  pt.y = evt.clientY;
  const p = pt.matrixTransform(svg.getScreenCTM().inverse());
  const vf = Math.round((p.x - M) / C);
  const vr = Math.round((p.y - M) / C);
  if (vf < 0 || vf > 8 || vr < 0 || vr > 9) return null;
  if (Math.hypot(p.x - (M + vf * C), p.y - (M + vr * C)) > C * 0.48) return null;
  const file = flipped ? 8 - vf : vf;
  const rank = flipped ? vr : 9 - vr;
  return FILES[file] + rank;
}

function onBoardClick(evt) {
  cursor = null; // the mouse took over: no keyboard cursor left drawn
  const sq = squareAt(evt);
  if (sq) pickSquare(sq);
  else drawCursor();
}

// A click, or Enter/Space on the keyboard's cursor: select an own piece, or move to a target.
function pickSquare(sq) {
  if (busy || !state || state.over || state.model_to_move) {
    drawCursor();
    return;
  }
  if (selected && targetsOf(selected).includes(sq)) {
    const from = selected;
    run(() => playMove(from, sq));
    return;
  }
  const letter = parseFen(state.fen)[sq];
  const own = letter && (isRed(letter) ? "red" : "black") === state.turn;
  selected = own && sq !== selected ? sq : null;
  render();
}

// What the board holds, for a screen reader: the cursor's square and piece, the selection.
function describeBoard() {
  let text = "Xiangqi board: arrow keys move a cursor, Enter or Space picks the piece under it " +
    "or plays the selected piece there, Escape lets it go";
  if (state && cursor) {
    const letter = parseFen(state.fen)[cursor];
    const what = letter ? `${isRed(letter) ? "red" : "black"} ${NAMES[letter.toLowerCase()]}`
      : "empty";
    text = `${cursor}: ${what}` + (selected ? `; ${selected} selected` : "") +
      (selected && targetsOf(selected).includes(cursor) ? ", a legal move" : "");
  }
  svg.setAttribute("aria-label", text);
}

// Keyboard play: the arrows move the cursor as the board is drawn (up is away from the side at
// the bottom, also when flipped), Enter or Space acts as a click there, Escape clears.
function onBoardKey(evt) {
  // a modifier is the browser's (Alt+Left goes back) or the system's: left to them
  if (!state || evt.altKey || evt.ctrlKey || evt.metaKey) return;
  const steps = { ArrowUp: [0, 1], ArrowDown: [0, -1], ArrowLeft: [-1, 0], ArrowRight: [1, 0] };
  if (evt.key in steps) {
    const [df, dr] = steps[evt.key].map((d) => (flipped ? -d : d));
    if (!cursor) {
      cursor = selected || (flipped ? "e9" : "e0");
    } else {
      const f = Math.min(8, Math.max(0, FILES.indexOf(cursor[0]) + df));
      const r = Math.min(9, Math.max(0, Number(cursor[1]) + dr));
      cursor = FILES[f] + r;
    }
    drawCursor();
    describeBoard();
  } else if ((evt.key === "Enter" || evt.key === " ") && cursor) {
    pickSquare(cursor);
    describeBoard();
  } else if (evt.key === "Escape" && selected) {
    selected = null;
    render();
  } else {
    return;
  }
  evt.preventDefault(); // no page scroll from the arrows or Space
}

svg.addEventListener("click", onBoardClick);
svg.addEventListener("keydown", onBoardKey);
// While the model thinks, New game abandons that request (its reply, for the old game, is never
// shown; the server still plays it there) and starts the game once the request has ended.
el("new-game").addEventListener("click", async () => {
  let abandoned = null; // the game whose model move was abandoned, and its version then
  if (asking) {
    wanted = null; // New game is the last word, not a game put in the URL meanwhile
    abandoned = { id: state.id, version: state.version };
    asking.abort();
    await running;
  }
  await run(newGame);
  // The new game was refused (a bad FEN, no server): the old game is still shown, and the server
  // plays the abandoned move there. Follow it until it lands, keeping the error that says why.
  if (abandoned && !busy && state && state.id === abandoned.id &&
      state.version === abandoned.version) {
    follow(abandoned.id, abandoned.version, false);
    renderStatus();
    renderButtons();
  }
});
// Enter in the FEN box starts the game from it, as a form would (New game, if it may run now)
el("fen").addEventListener("keydown", (evt) => {
  if (evt.key !== "Enter" || evt.isComposing) return;
  evt.preventDefault();
  if (!el("new-game").disabled) el("new-game").click();
});
el("undo").addEventListener("click", () => run(async () => {
  selected = null;
  state = await api("POST", `/${state.id}/undo`, { version: state.version });
  render();
  // Undoing the model's opening move (it plays Red, or Black from a FEN) leaves it to move:
  // let it play, as on a new game or a reload, instead of waiting for a click.
  await modelReplyIfDue();
}));
window.addEventListener("hashchange", () => openGame(location.hash.slice(1)));
el("flip").addEventListener("click", () => {
  flipped = !flipped;
  render();
});
el("model-move").addEventListener("click", () => run(async () => {
  selected = null;
  await askModel();
}));

async function start() {
  drawGrid();
  const linked = location.hash.slice(1);
  const remembered = rememberedGame();
  // the linked game, else the last one played here, else a new one; a linked id that is not
  // found says so, and does not make the page forget the remembered game
  const ids = [linked, remembered].filter((id, i, all) => id && all.indexOf(id) === i);
  await run(async () => {
    let missing = null;
    for (const id of ids) {
      try {
        await loadGame(id);
        break;
      } catch (err) {
        if (err.status !== 404) throw err;
        if (id === linked) missing = err.message;
      }
    }
    if (!state) await newGame();
    if (missing) {
      const shown = state.id === remembered ? "the last game played here is shown"
        : "a new game was started";
      showError(`${missing} (${shown})`);
    }
  });
}

start();
