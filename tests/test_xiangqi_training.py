"""The Xiangqi player's training data, a tiny training run, the evaluation, the shipped model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from apps.xiangqi.agreement import (
    agreement,
    agreement_sample,
    baseline_agreement,
    move_timing,
    position_key,
    training_keys,
)
from apps.xiangqi.batching import BatchingClosed, BatchingModel
from apps.xiangqi.board import Board
from apps.xiangqi.book import MoveBook
from apps.xiangqi.matches import play_match
from apps.xiangqi.model_player import ModelPlayer
from apps.xiangqi.player_settings import XIANGQI_CHECKPOINT
from apps.xiangqi.pooling import SymmetryPooling, board_ply
from apps.xiangqi.render import move_question, position_document
from apps.xiangqi.search import SearchConfig
from apps.xiangqi.symmetry import IDENTITY, SYMMETRIES, Symmetry
from apps.xiangqi.train_player import load_player_config
from apps.xiangqi.training import (
    GameRecord,
    MoveRowSource,
    board_at,
    encode_example,
    example_at,
    iter_positions,
    load_games,
    sample_positions,
    tokenizer_corpus,
)
from decision.errors import DecisionInputError
from decision.joint.layout import build_layout
from decision.tokenizer import special_ids, train_tokenizer
from decision.train.config import config_from_dict
from decision.train.loop import LoopHooks, train_loop
from decision.train.recipe import build_model

VALID = Path(__file__).resolve().parents[2] / "shared" / "data" / "xiangqi" / "valid-games.jsonl.gz"
pytestmark = pytest.mark.skipif(not VALID.is_file(), reason=f"no game data at {VALID}")

TINY_FIELDS: dict[str, Any] = dict(
    hidden_size=32, num_hidden_layers=2, layer_types=["linear_attention", "full_attention"],
    num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_key_heads=1,
    linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
    intermediate_size=64, max_position_embeddings=1024,
)


@pytest.fixture(scope="module")
def games() -> list[GameRecord]:
    return load_games(VALID, limit=40)


@pytest.fixture(scope="module")
def tokenizer(games: list[GameRecord]) -> Any:
    return train_tokenizer(list(tokenizer_corpus(games, 30, seed=1)), vocab_size=420)


@pytest.fixture(scope="module")
def tiny(tokenizer: Any) -> Any:
    cfg = config_from_dict({"model": TINY_FIELDS})
    return build_model(cfg, tokenizer).eval()


def test_positions_replay_the_game(games: list[GameRecord]) -> None:
    game = games[0]
    plies = [(board.fen(), move) for board, move in iter_positions(game)]
    assert [m for _, m in plies] == list(game.moves)
    assert board_at(game, 3).fen() == plies[3][0]
    assert board_at(game, 3).move_stack[-1].iccs() == game.moves[2]
    with pytest.raises(DecisionInputError):
        board_at(game, len(game.moves))


def test_example_is_what_model_player_asks_with_the_played_move(games: list[GameRecord]) -> None:
    for game in games[:3]:
        for ply in (0, 1, len(game.moves) // 2, len(game.moves) - 1):
            board = board_at(game, ply)
            ex = example_at(board, game.moves[ply])
            assert ex.document == position_document(board)
            assert ex.question == move_question(board)
            assert ex.gold == game.moves[ply]
            assert ex.gold in ex.question["answer"]["options"]
    with pytest.raises(DecisionInputError, match="not legal"):
        example_at(Board(), "a0a5")


def test_row_uses_the_decoder_layout_and_holds_the_gold_move(
    games: list[GameRecord], tokenizer: Any
) -> None:
    special = special_ids(tokenizer)
    game = games[1]
    ex = example_at(board_at(game, 5), game.moves[5])
    row = encode_example(ex, tokenizer, special)

    def enc(text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False).ids

    budget = max(len(enc(o)) for o in ex.question["answer"]["options"])
    decode = build_layout(special, enc(ex.document), [enc(ex.question["text"])], [budget])
    assert row.history_ids == decode.history_ids  # same prompt as decoding
    assert row.history_segments == decode.history_segments
    assert row.block_segments == decode.block_segments  # slot tied to its question (segment 1)
    assert len(row.block_ids) == len(decode.block)
    assert row.block_ids[0] == special.answers[0]
    assert row.slot_of == [-1] + [0] * budget
    answer = [t for t in row.block_ids[1:] if t != special.eos]
    assert tokenizer.decode(answer).replace(" ", "") == ex.gold


def test_row_options_are_the_legal_moves_and_the_option_loss_is_the_players_probability(
    games: list[GameRecord], tokenizer: Any, tiny: Any
) -> None:
    """exp(-option loss) of a row is the probability the player's scoring decoder gives the
    master's move: the loss trains what the player ranks by."""
    from decision.joint.engine import decide
    from decision.train.option_loss import gold_option_log_probs
    from decision.train.rows import collate

    special = special_ids(tokenizer)
    game = games[2]
    ex = example_at(board_at(game, 9), game.moves[9])
    row = encode_example(ex, tokenizer, special)
    options = ex.question["answer"]["options"]
    assert len(row.options) == len(options) > 1
    assert row.block_ids[row.options_start : row.options_start + len(row.options[0])] \
        == list(row.options[options.index(ex.gold)])
    batch = collate([row], special.pad)
    with torch.no_grad():
        cache = tiny.prefill(batch.history_ids, batch.history_mask, batch.history_segments)
        log_p = gold_option_log_probs(
            lambda ids: tiny.denoise(ids, cache, batch.block_mask, batch.block_segments),
            batch.block_ids, batch.scored_slots, special.mask)
    decision = decide(tiny, ex.document, [ex.question], return_probabilities=True,
                      score_options=True)
    want = decision.answers[0].option_probabilities[ex.gold]
    assert abs(float(log_p.exp()[0]) - want) < 1e-4


def test_sampling_is_deterministic_and_weights_fragments(games: list[GameRecord]) -> None:
    a = sample_positions(games, 50, seed=3)
    assert a == sample_positions(games, 50, seed=3)
    assert a != sample_positions(games, 50, seed=4)
    assert all(0 <= r.ply < len(games[r.game].moves) for r in a)
    mixed = games[:4] + [GameRecord(games[5].start_fen, games[5].moves, "中局")]
    refs = sample_positions(mixed, 200, seed=1, fragment_weight=0.0)
    assert all(r.game < 4 for r in refs)
    with pytest.raises(DecisionInputError):
        sample_positions(games, 0, seed=1)


def test_sampling_only_fragments_at_weight_zero_is_refused(games: list[GameRecord]) -> None:
    # every ply weighs 0: random.choices raised a bare ValueError ("Total of weights ...")
    fragments = [GameRecord(g.start_fen, g.moves, "中局") for g in games[:3]]
    with pytest.raises(DecisionInputError, match="fragment_weight"):
        sample_positions(fragments, 5, seed=1, fragment_weight=0.0)


def test_opening_draws_stay_before_max_ply_and_cover_short_games(
    games: list[GameRecord],
) -> None:
    refs = sample_positions(games, 300, seed=3, max_ply=6)
    assert refs == sample_positions(games, 300, seed=3, max_ply=6)
    assert all(0 <= r.ply < min(6, len(games[r.game].moves)) for r in refs)
    assert {r.ply for r in refs} == set(range(6))  # every opening ply is drawn, not only ply 0
    short = [GameRecord(games[0].start_fen, games[0].moves[:2], games[0].category)]
    assert {r.ply for r in sample_positions(short, 50, seed=1, max_ply=6)} == {0, 1}
    with pytest.raises(DecisionInputError, match="max_ply"):
        sample_positions(games, 5, seed=1, max_ply=0)


def test_row_source_skips_forced_moves(games: list[GameRecord], tokenizer: Any) -> None:
    source = MoveRowSource(games, sample_positions(games, 20, seed=2), tokenizer)
    for i in range(5):
        ex = source.example(i)
        assert len(ex.question["answer"]["options"]) > 1
        assert source.row(i).block_ids == source.row(i).block_ids  # pure function of i
        # the source's cached option ids lay the row out as an uncached encoding does
        fresh = encode_example(ex, tokenizer, special_ids(tokenizer))
        assert (source.row(i).history_ids, source.row(i).block_ids) == (
            fresh.history_ids, fresh.block_ids)


def test_mirror_share_mirrors_position_and_gold_deterministically(
    games: list[GameRecord], tokenizer: Any
) -> None:
    refs = sample_positions(games, 40, seed=2)
    plain = MoveRowSource(games, refs, tokenizer)
    half = MoveRowSource(games, refs, tokenizer, mirror_share=0.5, seed=9)
    flags = [half.mirrored(i) for i in range(40)]
    assert flags == [MoveRowSource(games, refs, tokenizer, 0.5, 9).mirrored(i) for i in range(40)]
    assert 5 < sum(flags) < 35  # about half, and both kinds present
    assert flags != [MoveRowSource(games, refs, tokenizer, 0.5, 10).mirrored(i) for i in range(40)]
    assert not any(plain.mirrored(i) for i in range(40))
    assert all(MoveRowSource(games, refs, tokenizer, 1.0).mirrored(i) for i in range(40))
    for i in range(12):
        ex, orig = half.example(i), plain.example(i)
        if not flags[i]:
            assert ex == orig
            continue
        # the mirror's document has the same pieces with the files reversed, and the gold move
        # is the master's move in the mirror, among the mirrored position's legal moves
        grid = [line[2:] for line in orig.document.splitlines()[2:12]]
        assert [line[2:] for line in ex.document.splitlines()[2:12]] == [r[::-1] for r in grid]
        assert ex.gold == Symmetry(mirror=True).iccs(orig.gold)
        assert ex.gold in ex.question["answer"]["options"]
        assert sorted(ex.question["answer"]["options"]) == sorted(
            Symmetry(mirror=True).iccs(m) for m in orig.question["answer"]["options"])
    with pytest.raises(DecisionInputError, match="mirror_share"):
        MoveRowSource(games, refs, tokenizer, mirror_share=1.5)


def test_image_share_shows_late_positions_in_their_images(
    games: list[GameRecord], tokenizer: Any
) -> None:
    refs = sample_positions(games, 200, seed=4)
    plain = MoveRowSource(games, refs, tokenizer)
    source = MoveRowSource(games, refs, tokenizer, seed=9, image_share=0.75, image_from_ply=20)
    again = MoveRowSource(games, refs, tokenizer, seed=9, image_share=0.75, image_from_ply=20)
    boards = [plain.position(i)[0] for i in range(200)]
    images = [source.image(i, b) for i, b in enumerate(boards)]
    assert images == [again.image(i, b) for i, b in enumerate(boards)]
    late = [im for im, b in zip(images, boards, strict=True) if board_ply(b) >= 20]
    assert all(im == IDENTITY for im, b in zip(images, boards, strict=True) if board_ply(b) < 20)
    assert 0.5 < sum(im != IDENTITY for im in late) / len(late) < 0.95
    assert {im for im in late} == set(SYMMETRIES)  # every image, the position itself included
    for i in range(60):
        ex, orig = source.example(i), plain.example(i)
        image = images[i]
        assert ex.gold == image.iccs(orig.gold)
        assert sorted(ex.question["answer"]["options"]) == sorted(
            image.iccs(m) for m in orig.question["answer"]["options"])
        assert ex.document == example_at(image.board(boards[i]), ex.gold).document
    with pytest.raises(DecisionInputError, match="image_share"):
        MoveRowSource(games, refs, tokenizer, image_share=1.5)
    with pytest.raises(DecisionInputError, match="image_share"):
        MoveRowSource(games, refs, tokenizer, mirror_share=0.5, image_share=0.5)


def test_book_targets_label_recurring_positions_with_the_most_frequent_move(
    games: list[GameRecord], tokenizer: Any
) -> None:
    book = MoveBook.from_games((g.start_fen, g.moves) for g in games)
    refs = sample_positions(games, 30, seed=3, max_ply=4)  # openings: positions that recur
    plain = MoveRowSource(games, refs, tokenizer)
    booked = MoveRowSource(games, refs, tokenizer, book=book, book_min_count=2)
    changed = 0
    for i in range(30):
        ref = refs[i]
        board = board_at(games[ref.game], ref.ply)
        if len(board.legal_moves) < 2:
            continue
        entry = book.most_common(board.zobrist_hash())
        assert entry is not None and entry.total >= 1
        expected = entry.move if entry.total >= 2 else games[ref.game].moves[ref.ply]
        assert booked.example(i).gold == expected
        assert plain.example(i).gold == games[ref.game].moves[ref.ply]
        changed += expected != games[ref.game].moves[ref.ply]
    assert changed > 0  # the openings of 40 games disagree somewhere
    # teacher records (after book_games) keep their labels; mirrored rows mirror the book's move
    teacher = MoveRowSource(games, refs, tokenizer, book=book, book_min_count=2, book_games=0)
    assert [teacher.example(i) for i in range(10)] == [plain.example(i) for i in range(10)]
    mirrored = MoveRowSource(games, refs, tokenizer, 1.0, book=book, book_min_count=2)
    for i in range(10):
        assert mirrored.example(i).gold == Symmetry(mirror=True).iccs(booked.example(i).gold)
    with pytest.raises(DecisionInputError, match="book_min_count"):
        MoveRowSource(games, refs, tokenizer, book_min_count=2)  # no book
    with pytest.raises(DecisionInputError, match="book_min_count"):
        MoveRowSource(games, refs, tokenizer, book=book, book_min_count=-1)


def test_sound_sets_are_the_target_and_the_moves_the_blunder_check_keeps(
    games: list[GameRecord], tokenizer: Any
) -> None:
    from apps.xiangqi.search_guided import sound_moves

    refs = sample_positions(games, 12, seed=4)
    plain = MoveRowSource(games, refs, tokenizer)
    checked = MoveRowSource(games, refs, tokenizer, sound_depth=1)
    mirrored = MoveRowSource(games, refs, tokenizer, mirror_share=1.0, sound_depth=1)
    narrowed = 0
    for i in range(12):
        row, same = checked.row(i), plain.row(i)
        assert same.option_set == ()
        assert (row.history_ids, row.block_ids, row.options) == \
            (same.history_ids, same.block_ids, same.options)
        board, gold = checked.position(i)
        options = checked.example(i).question["answer"]["options"]
        keep = {m.iccs() for m in sound_moves(board, SearchConfig(depth=1), 0.0)} | {gold}
        if len(keep) == len(options):  # every move kept: nothing to learn, no set
            assert row.option_set == ()
            continue
        narrowed += 1
        assert [options[k] for k in row.option_set] == [o for o in options if o in keep]
        assert gold in [options[k] for k in row.option_set]
        flipped_board, flipped_gold = mirrored.position(i)
        flipped = mirrored.row(i)
        flipped_options = mirrored.example(i).question["answer"]["options"]
        assert flipped_gold in [flipped_options[k] for k in flipped.option_set]
        assert sorted(flipped_options[k] for k in flipped.option_set) == sorted(
            Symmetry(mirror=True).iccs(m) for m in keep)
        assert flipped_board.fen() == Symmetry(mirror=True).board(board).fen()
    assert narrowed > 0
    with pytest.raises(DecisionInputError, match="sound_depth"):
        MoveRowSource(games, refs, tokenizer, sound_depth=-1)


def test_tiny_training_run_loss_is_finite_and_falls(
    games: list[GameRecord], tokenizer: Any, tmp_path: Path
) -> None:
    cfg = config_from_dict({
        "model": TINY_FIELDS,
        "optim": {"lr": 0.01, "warmup_steps": 2, "batch_size": 2},
        "run": {"out_dir": str(tmp_path), "max_steps": 20, "log_every": 10, "eval_every": 1000,
                "threads": 1, "checkpoint_minutes": 100.0, "denoise_draws": 2},
    })
    model = build_model(cfg, tokenizer)
    source = MoveRowSource(games, sample_positions(games, 2, seed=5), tokenizer)  # memorise 2
    ids = special_ids(tokenizer)
    hooks = LoopHooks(rows=source.row, pad_token_id=ids.pad, mask_token_id=ids.mask,
                      log=lambda s: None)
    result = train_loop(model, cfg, hooks, tmp_path)
    losses = torch.tensor(result.losses)
    assert result.step == 20 and bool(torch.isfinite(losses).all())
    assert losses[-5:].mean() < 0.7 * losses[:5].mean()


def test_player_config_file_is_valid_and_strict(tmp_path: Path) -> None:
    cfg, xq = load_player_config(Path(__file__).resolve().parents[1] / "configs/xiangqi.json")
    assert cfg.run.threads == 1 and xq.train_positions > 0
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"xiangqi": {"train_positons": 5}}))
    with pytest.raises(DecisionInputError, match="unknown xiangqi keys"):
        load_player_config(bad)


def test_agreement_on_tiny_model_is_well_formed(games: list[GameRecord], tiny: Any) -> None:
    sample = agreement_sample(games, 6, seed=1)
    seen = training_keys(games[:2])
    result = agreement(tiny, sample, seen, batch_size=4)
    assert result.positions == 6 and result.legal == 6
    assert 0.0 <= result.top1 <= 1.0
    unseen = sum(p.key not in seen for p in sample)
    assert result.unseen_positions == unseen
    assert sum(p["n"] for p in result.by_phase.values()) == 6
    assert [r["gold"] for r in result.results] == [p.example.gold for p in sample]
    assert sum(r["hit"] for r in result.results) == round(result.top1 * 6)
    low, high = result.top1_interval
    assert 0.0 <= low <= result.top1 <= high <= 1.0 and high - low > 0.2  # 6 positions: wide
    if unseen:
        low, high = result.unseen_top1_interval
        assert low <= result.unseen_top1 <= high
    else:
        assert result.unseen_top1_interval is None
    assert [r["seen"] for r in result.results] == [p.key in seen for p in sample]
    # each position's key, kept through JSON (compare_xiangqi_agreement checks it)
    keys = [r["key"] for r in json.loads(json.dumps(result.results))]
    assert keys == [p.key for p in sample] and all(isinstance(k, int) for k in keys)
    base = baseline_agreement(games, 6, seed=1)  # same positions as the sample
    assert base["positions"] == 6 and 0 < base["uniform_random_top1"] < 1
    assert 0 <= base["greedy_top1"] <= 1
    guided = agreement(tiny, sample, seen, batch_size=4, search=SearchConfig(depth=1))
    assert guided.player == "policy+search (depth 1, margin 0)" and guided.legal == 6
    timing = move_timing(tiny, sample[:2])
    assert timing["positions"] == 2 and timing["wall_s"] > 0
    assert timing["pooled_positions"] == 0
    pooled = move_timing(tiny, sample[:2], pooling=SymmetryPooling(from_ply=0))
    assert pooled["positions"] == 2 and pooled["pooled_positions"] == 2


def test_batched_decisions_equal_model_player_alone(games: list[GameRecord], tiny: Any) -> None:
    boards = [board_at(games[2], p) for p in (0, 7, 12)]
    alone = [ModelPlayer(tiny).choose(b) for b in boards]
    batching = BatchingModel(tiny, max_batch=4, wait_s=0.05)
    try:
        assert [ModelPlayer(batching).choose(b) for b in boards] == alone
    finally:
        batching.close()


def test_match_on_tiny_model_plays_only_legal_moves(tiny: Any) -> None:
    result = play_match(tiny, "greedy", games=2, max_plies=8, seed=0, concurrency=2)
    assert result.games == 2 and len(result.results) == 2
    assert result.wins + result.draws + result.unfinished + result.losses == 2
    assert [r["model"] for r in result.results] == ["red", "black"]
    assert result.model_moves == sum(r["model_moves"] for r in result.results) > 0
    assert result.mean_material == sum(r["material"] for r in result.results) / 2
    for record in result.results:  # replay: every move (the model's included) is legal
        board = Board()
        for move in record["moves"].split():
            board.push_iccs(move)
        assert board.result() == record["result"]
    with pytest.raises(DecisionInputError):
        play_match(tiny, "minimax", games=1)


class _InterruptingOpponent:
    """A random mover whose ``moves``-th move is a Ctrl-C (as the main thread would get it)."""

    def __init__(self, seed: int, moves: int, started: list[int]) -> None:
        from apps.xiangqi.players import RandomPlayer

        self.inner, self.left = RandomPlayer(seed), moves
        started.append(seed)

    def choose(self, board: Board) -> Any:
        self.left -= 1
        if self.left == 0:
            raise KeyboardInterrupt
        return self.inner.choose(board)


def test_an_interrupted_match_stops_its_games_at_once(
    tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ctrl-C during a match waited for every game in play to reach its end (and a bar that
    the last of them redrew below the "interrupted" line): the games not started are dropped,
    those in play fail at their next model move, none is counted or written as finished."""
    import io

    import apps.xiangqi.matches as matches
    from decision.progress import Progress

    started: list[int] = []
    monkeypatch.setattr(matches, "_opponent", lambda name, seed: _InterruptingOpponent(
        seed, 3 if seed == 0 else 10**6, started))
    batches: list[BatchingModel] = []
    real = matches.BatchingModel

    def recording(*args: Any, **kwargs: Any) -> BatchingModel:
        batches.append(real(*args, **kwargs))
        return batches[-1]

    monkeypatch.setattr(matches, "BatchingModel", recording)
    stream, log = io.StringIO(), tmp_path / "games.jsonl"
    bar = Progress(12, label="match", unit="games", stream=stream)
    with pytest.raises(KeyboardInterrupt):
        play_match(tiny, "random", games=12, max_plies=150, concurrency=3, progress=log, bar=bar)
    # were 12, every game played out; the thread of the interrupted game may have taken the
    # next one before the rest were dropped
    assert len(started) <= 4
    assert not log.exists() and bar.done == 0
    assert batches[0]._closed and not batches[0]._thread.is_alive()
    with pytest.raises(BatchingClosed):  # a late model move fails, not waits
        batches[0].decide("doc", [])


@pytest.mark.skipif(not (XIANGQI_CHECKPOINT / "config.json").is_file(),
                    reason="no shipped checkpoint at models/xiangqi yet")
def test_ctrl_c_ends_a_match_with_status_130_and_says_where_its_games_are(tmp_path: Path) -> None:
    """The command printed a traceback after waiting for the games in play (18 s on 16 games)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    log = tmp_path / "games.jsonl"
    command = [sys.executable, "-m", "apps.xiangqi.evaluate", "--model", str(XIANGQI_CHECKPOINT),
               "--threads", "1", "match", "--opponent", "random", "--games", "40",
               "--concurrency", "4", "--progress", str(log)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with subprocess.Popen(command, cwd=Path(__file__).resolve().parents[1], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as process:
        assert process.stderr is not None
        first = process.stderr.readline()  # the bar's first line: the model is loaded
        assert first.startswith("match vs random ["), first
        time.sleep(0.5)  # inside the match (the bar is drawn just before it starts)
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "Traceback" not in err and out == ""
    assert err.endswith(f"match stopped: the games finished so far are in {log}\n"
                        "apps.xiangqi.evaluate: interrupted\n")


def test_agreement_and_matches_show_their_progress(
    games: list[GameRecord], tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 10,000-position agreement ran half an hour, a match minutes, without a word until the
    end: a bar on stderr counts positions / games (``--quiet``: none)."""
    import io

    from decision.progress import Progress

    stream = io.StringIO()
    bar = Progress(5, label="agreement", unit="positions", stream=stream)
    agreement(tiny, agreement_sample(games, 5, seed=1), set(), batch_size=2, bar=bar)
    assert bar.done == 5 and "5/5 positions" in stream.getvalue()  # 2 + 2 + 1
    stream = io.StringIO()
    bar = Progress(2, label="match", unit="games", stream=stream)
    play_match(tiny, "random", games=2, max_plies=4, concurrency=2, bar=bar)
    assert bar.done == 2 and "2/2 games" in stream.getvalue()
    from apps.xiangqi.evaluate import main as evaluate_main

    model = Path(__file__).resolve().parents[1] / "models" / "xiangqi"
    args = ["--model", str(model), "agreement", "--positions", "3", "--valid-games", str(VALID),
            "--train-games", str(VALID), "--keys-cache", str(tmp_path / "keys.npy")]
    assert evaluate_main(args) == 0
    assert "agreement [" in capsys.readouterr().err
    assert evaluate_main([*args, "--quiet"]) == 0
    assert "agreement [" not in capsys.readouterr().err


def test_position_key_is_placement_and_side() -> None:
    a, b = Board(), Board()
    for move in ("h2e2", "h9g7", "b0c2", "i9i8"):
        a.push_iccs(move)
    for move in ("b0c2", "i9i8", "h2e2", "h9g7"):  # same position by another order
        b.push_iccs(move)
    assert position_key(a) == position_key(b)
    assert position_key(Board()) != position_key(Board(Board().fen().replace(" w ", " b ")))


@pytest.mark.skipif(not (XIANGQI_CHECKPOINT / "config.json").is_file(),
                    reason="no shipped checkpoint at models/xiangqi yet")
def test_shipped_model_loads_and_plays_legal_moves(games: list[GameRecord]) -> None:
    from decision import load_model

    model = load_model(str(XIANGQI_CHECKPOINT))
    size = sum(f.stat().st_size for f in XIANGQI_CHECKPOINT.iterdir() if f.is_file())
    assert size <= 40 * 2**20
    player = ModelPlayer(model)
    for game in games[:3]:
        for ply in (0, len(game.moves) // 3, len(game.moves) - 1):
            board = board_at(game, ply)
            assert player.choose(board) in board.legal_moves


def test_init_from_trains_on_from_a_saved_player(
    tiny: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--init-from: a fresh run starts from a model directory's weights and tokenizer (here
    with half of its draws from the openings)."""
    from apps.xiangqi.train_player import main
    from decision.model import load_model

    start = tmp_path / "start"
    tiny.save(start)
    config = tmp_path / "player.json"
    config.write_text(json.dumps({
        "train": {"model": TINY_FIELDS,
                  "optim": {"lr": 0.01, "warmup_steps": 1, "batch_size": 2},
                  "run": {"out_dir": str(tmp_path / "run"), "max_steps": 2, "eval_every": 1000,
                          "threads": 1, "log_every": 1}},
        "xiangqi": {"train_games": str(VALID), "valid_games": str(VALID),
                    "train_positions": 8, "val_positions": 2, "opening_share": 0.5,
                    "opening_plies": 4},
    }))
    export = tmp_path / "export"
    assert main(["--config", str(config), "--init-from", str(start),
                 "--export", str(export)]) == 0
    assert "openings: 4 of 8 master draws from plies < 4" in capsys.readouterr().err
    trained = load_model(export, dtype=torch.float32)
    assert trained.tokenizer.to_str() == tiny.tokenizer.to_str()  # not a new tokenizer
    before = dict(tiny.named_parameters())
    moved = [n for n, p in trained.named_parameters()
             if not torch.allclose(p, before[n].to(torch.bfloat16).float())]
    assert moved  # the two steps changed the weights it started from


def test_baselines_need_no_model_and_are_written_with_out(tmp_path: Path) -> None:
    """``agreement --baselines`` scores the uniform and greedy movers alone: no model is loaded
    (the path given does not exist), and ``--out`` gets the same JSON that is printed."""
    from apps.xiangqi.evaluate import main as evaluate_main

    out = tmp_path / "baselines.json"
    assert evaluate_main(["--model", str(tmp_path / "no-model"), "--out", str(out),
                          "agreement", "--valid-games", str(VALID), "--positions", "5",
                          "--baselines"]) == 0
    written = json.loads(out.read_text())["baselines"]
    assert written["positions"] == 5 and 0 <= written["greedy_top1"] <= 1
    after = tmp_path / "after.json"  # --out may also follow the subcommand
    assert evaluate_main(["--model", str(tmp_path / "no-model"), "agreement", "--valid-games",
                          str(VALID), "--positions", "5", "--baselines", "--out",
                          str(after)]) == 0
    before, later = json.loads(out.read_text()), json.loads(after.read_text())
    assert later["setup"].pop("argv") != before["setup"].pop("argv")  # as each was spelt
    assert later == before


def test_player_config_values_are_checked_before_the_games_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong value was a traceback minutes later (after 2.2M moves were read), a missing games
    file a FileNotFoundError traceback, and a contracts config silently trained Xiangqi."""
    from apps.xiangqi.train_player import main

    bad = tmp_path / "bad.json"
    out = str(tmp_path / "run")
    for section, words in [
        ({"xiangqi": {"train_positions": "many"}}, "train_positions must be int"),
        ({"xiangqi": {"val_positions": 0}}, "must be >= 1"),
        ({"xiangqi": {"mirror_share": 2}}, "mirror_share must be in [0, 1]"),
        ({"xiangqi": {"image_share": 2}}, "image_share must be in [0, 1]"),
        ({"xiangqi": {"image_from_ply": -1}}, "image_from_ply >= 0"),
        ({"xiangqi": {"image_share": 0.5, "mirror_share": 0.5}}, "cannot both be set"),
        ({"xiangqi": {"opening_share": -0.1}}, "opening_share must be in [0, 1]"),
        ({"xiangqi": {"opening_plies": 0}}, "opening_plies must be >= 1"),
        ({"xiangqi": {"book_min_count": -1}}, "book_min_count must be >= 0"),
        ({"xiangqi": {"drill_share": 1.5}}, "drill_share must be in [0, 1]"),
        ({"xiangqi": {"drill_share": 0.2}}, "needs 1 <= book_min_count <= drill_min_count"),
        ({"xiangqi": {"drill_share": 0.2, "book_min_count": 6}}, "book_min_count <= drill_min"),
        ({"xiangqi": {"sound_depth": 4}}, "sound_depth must be 0 (off) to 3"),
        ({"xiangqi": {"sound_depth": 2}}, "needs data.option_set_loss_weight > 0"),
        ({"train": {"data": {"task": "contracts"}}}, "this driver trains 'xiangqi'"),
        ({"xiangqi": {"train_games": str(tmp_path / "none.jsonl.gz")}}, "cannot read games file"),
    ]:
        bad.write_text(json.dumps(section))
        assert main(["--config", str(bad), "--out-dir", out, "--max-steps", "1"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and words in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_an_interrupted_export_keeps_the_model_it_replaces(
    tiny: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """export deleted the model files of ``dest`` (models/xiangqi) before writing the new ones."""
    from apps.xiangqi.train_player import export
    from decision.model import DecisionModel, load_model
    from decision.model.testing import save_killed_midway

    ckpt = tmp_path / "ckpt"
    tiny.save(ckpt)
    dest = tmp_path / "xiangqi"
    export(ckpt, dest)
    (dest / "README.md").write_text("model card")

    monkeypatch.setattr(DecisionModel, "save", save_killed_midway)
    with pytest.raises(KeyboardInterrupt):
        export(ckpt, dest)
    monkeypatch.undo()
    assert load_model(dest, dtype=None).dtype == torch.bfloat16  # still whole
    export(ckpt, dest)
    assert sorted(p.name for p in dest.iterdir()) == [
        "README.md", "config.json", "model.safetensors", "tokenizer.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "xiangqi"]


@pytest.mark.parametrize("killed_at", [1, 2, 3])  # the move of: weights, tokenizer, config
def test_an_export_killed_between_two_moves_leaves_no_model_that_loads_mixed(
    tiny: Any, games: list[GameRecord], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str], killed_at: int,
) -> None:
    """export moves the new files into ``dest`` one by one: killed after the weights, ``dest``
    held the new weights beside the old tokenizer and config.json, and loaded without a word
    (same vocabulary size), every token read through another tokenizer than the weights
    learnt. Now ``dest`` lacks config.json until the last move: it refuses to load, and the
    next export completes it; its model card stays throughout."""
    import os

    from apps.xiangqi.train_player import export
    from decision.errors import CheckpointError
    from decision.model import load_model

    other = train_tokenizer(list(tokenizer_corpus(games, 30, seed=5)), vocab_size=420)
    assert other.get_vocab_size() == tiny.tokenizer.get_vocab_size()
    assert other.to_str() != tiny.tokenizer.to_str()
    old, new = tmp_path / "old", tmp_path / "new"
    tiny.save(old)
    retrained = build_model(config_from_dict({"model": TINY_FIELDS}), other)
    with torch.no_grad():
        for p in retrained.parameters():
            p.add_(0.5)
    retrained.save(new)
    dest = tmp_path / "xiangqi"
    export(old, dest)
    (dest / "README.md").write_text("model card")

    replace, moves = os.replace, []

    def killed(src: Any, dst: Any) -> None:
        if Path(dst).parent == dest:  # a move into dest (the save itself renames in scratch)
            moves.append(Path(dst).name)
            if len(moves) == killed_at:
                raise KeyboardInterrupt
        replace(src, dst)

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        export(new, dest)
    monkeypatch.undo()
    assert moves[:3] == ["model.safetensors", "tokenizer.json", "config.json"][:killed_at]
    with pytest.raises(CheckpointError, match="missing config.json"):
        load_model(dest)
    assert (dest / "README.md").read_text() == "model card"
    capsys.readouterr()
    export(new, dest)  # the next export: whole again
    assert f"{dest} was left without config.json by an interrupted export" in \
        capsys.readouterr().err
    assert load_model(dest).tokenizer.to_str() == other.to_str()
    assert sorted(p.name for p in dest.iterdir()) == [
        "README.md", "config.json", "model.safetensors", "tokenizer.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "old", "xiangqi"]


def player_config(tmp_path: Path, max_steps: int = 2) -> Path:
    """A tiny player run (a new 420-token tokenizer on 30 positions, 2 steps of batch 2)."""
    config = tmp_path / "player.json"
    config.write_text(json.dumps({
        "train": {"model": TINY_FIELDS, "tokenizer": {"vocab_size": 420},
                  "optim": {"lr": 0.01, "warmup_steps": 1, "batch_size": 2},
                  "run": {"out_dir": str(tmp_path / "run"), "max_steps": max_steps,
                          "eval_every": 1000, "threads": 1, "log_every": 1}},
        "xiangqi": {"train_games": str(VALID), "valid_games": str(VALID),
                    "train_positions": 8, "val_positions": 2, "tokenizer_positions": 30},
    }))
    return config


def test_player_max_steps_below_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--max-steps 0 was a run of no step that wrote a checkpoint at step 0."""
    from apps.xiangqi.train_player import main

    assert main(["--config", str(player_config(tmp_path)), "--max-steps", "0"]) == 2
    assert capsys.readouterr().err.strip() == "error: --max-steps must be >= 1, got 0"
    assert not (tmp_path / "run").exists()


def test_player_fresh_run_refuses_a_directory_that_holds_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Started again without --resume, the driver trained a new run over the old one's
    checkpoint and tokenizer."""
    from apps.xiangqi.train_player import main
    from decision.train.checkpoint import load_trainer_state

    config = str(player_config(tmp_path))
    assert main(["--config", config]) == 0
    ckpt = tmp_path / "run" / "checkpoint"
    weights = (ckpt / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["--config", config, "--max-steps", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # refused before the games load
    assert line.startswith(f"error: {tmp_path / 'run'} already holds a run (checkpoint, ")
    assert "--resume" in line
    assert load_trainer_state(ckpt)["step"] == 2
    assert (ckpt / "model.safetensors").read_bytes() == weights


def test_player_resume_refuses_a_checkpoint_without_trainer_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--resume over a checkpoint lacking trainer_state.pt started a fresh run over it."""
    from apps.xiangqi.train_player import main

    config = str(player_config(tmp_path))
    assert main(["--config", config, "--max-steps", "1"]) == 0
    ckpt = tmp_path / "run" / "checkpoint"
    (ckpt / "trainer_state.pt").unlink()
    weights = (ckpt / "model.safetensors").read_bytes()
    capsys.readouterr()
    assert main(["--config", config, "--resume"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: cannot resume: {ckpt} has no trainer_state.pt")
    assert "--init-from" in line
    assert (ckpt / "model.safetensors").read_bytes() == weights


def test_player_ctrl_c_checkpoints_skips_the_export_and_exits_130(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGINT stopped the loop with a checkpoint, but the driver then exported the interrupted
    run and exited 0."""
    import os
    import signal

    from apps.xiangqi.train_player import main
    from decision.train.checkpoint import load_trainer_state

    real = MoveRowSource.row

    def row(self: MoveRowSource, i: int):  # noqa: ANN202 - the hook's row type
        if i == 4:  # during step 3 (batch 2)
            os.kill(os.getpid(), signal.SIGINT)
        return real(self, i)

    monkeypatch.setattr(MoveRowSource, "row", row)
    before = signal.getsignal(signal.SIGINT)
    out, export = tmp_path / "run", tmp_path / "export"
    assert main(["--config", str(player_config(tmp_path, max_steps=6)),
                 "--export", str(export)]) == 130
    err = capsys.readouterr().err
    assert "SIGINT received: stopping at step 3, with a checkpoint" in err
    assert err.strip().splitlines()[-1] == (
        f"interrupted by SIGINT at step 3: checkpoint saved in {out / 'checkpoint'}; "
        "not exported; continue with --resume")
    assert load_trainer_state(out / "checkpoint")["step"] == 3
    assert not export.exists()
    # the handler the run found is back (SIG_IGN where the tests run as a background job)
    assert signal.getsignal(signal.SIGINT) == before


def test_player_export_is_written_with_the_run_directory_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--export let go of the run directory when training returned and exported after: a run
    started into it then could swap the checkpoint the export read."""
    from apps.xiangqi import train_player
    from decision.errors import DecisionInputError
    from decision.train.run_dir import hold_run_dir

    out, dest = tmp_path / "run", tmp_path / "export"
    refused: list[str] = []
    export = train_player.export

    def export_noting_the_lock(checkpoint: Path, to: Path) -> Path:
        with pytest.raises(DecisionInputError) as exc, hold_run_dir(str(out)):
            pass
        refused.append(exc.value.message)
        return export(checkpoint, to)

    monkeypatch.setattr(train_player, "export", export_noting_the_lock)
    assert train_player.main(["--config", str(player_config(tmp_path)),
                              "--export", str(dest)]) == 0
    assert len(refused) == 1 and "in use by another training run" in refused[0]
    assert capsys.readouterr().err.strip().endswith(f"exported bf16 model to {dest}")
    assert (dest / "model.safetensors").is_file()
    with hold_run_dir(str(out)):  # let go once the command is done
        pass


def test_player_exit_status_is_decision_trains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A diverged run exited 2 (decision train: 1), and Ctrl-C while the games load (minutes
    for all of them) was a KeyboardInterrupt traceback (decision train: 'interrupted', 130)."""
    from apps.xiangqi import train_player
    from decision.train import loop

    real = loop.batch_loss
    calls = []

    def diverging(*args: Any, **kwargs: Any) -> torch.Tensor:
        calls.append(1)
        loss = real(*args, **kwargs)
        return loss * float("nan") if len(calls) == 2 else loss

    monkeypatch.setattr(loop, "batch_loss", diverging)
    config = str(player_config(tmp_path))
    assert train_player.main(["--config", config]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: the training loss is nan at step 2:")

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(train_player, "load_games", interrupted)
    assert train_player.main(["--config", config, "--out-dir", str(tmp_path / "b")]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "interrupted"


def test_player_export_is_checked_before_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--export into the run's checkpoint replaced its weights with bf16 ones, a file there
    crashed after the run, a directory DEST.export.tmp of the user's was deleted, and
    --export . crashed after the run."""
    from apps.xiangqi.train_player import main
    from decision.model import load_model

    monkeypatch.chdir(tmp_path)
    config = str(player_config(tmp_path))  # the run in tmp_path/run
    Path("notes").write_text("keep")
    Path("mine.export.tmp").mkdir()
    Path("mine.export.tmp/notes.txt").write_text("keep")
    for dest, words in [("run/checkpoint", "is the run's own checkpoint"),
                        ("notes", "is a file"),
                        ("mine", "holds 'notes.txt', which is not an exported model")]:
        assert main(["--config", config, "--export", dest]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line.startswith(f"error: --export {dest}: ") and words in line
        assert not Path("run").exists()  # refused before any training
    assert Path("mine.export.tmp/notes.txt").read_text() == "keep"
    # the run directory itself (the layout of the first stages in docs/xiangqi-model.md): the
    # model files are written beside the run's, which stay
    assert main(["--config", config, "--export", "run"]) == 0
    assert load_model("run", dtype=None).dtype == torch.bfloat16
    assert (Path("run/checkpoint") / "trainer_state.pt").is_file()
    assert main(["--config", config, "--out-dir", "run2", "--export", "."]) == 0
    assert load_model(".", dtype=None).dtype == torch.bfloat16
    assert Path("notes").read_text() == "keep"


def edited_player_config(tmp_path: Path, name: str, train: dict[str, Any] | None = None,
                         **xiangqi: Any) -> Path:
    """:func:`player_config` with ``train`` sections updated and ``xiangqi`` values set."""
    raw = json.loads(player_config(tmp_path).read_text())
    for section, values in (train or {}).items():
        raw["train"].setdefault(section, {}).update(values)
    raw["xiangqi"].update(xiangqi)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(raw))
    return path


@pytest.mark.parametrize(("key", "train", "other"), [
    ("soft_targets", {"data": {"soft_option_loss_weight": 1.0}}, {}),
    ("teacher_games", None, {"teacher_share": 0.5}),
])
def test_player_unreadable_inputs_are_refused_before_any_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], key: str,
    train: dict[str, Any] | None, other: dict[str, Any],
) -> None:
    """The soft-target and teacher files were read after tokenizer.json was written, so the
    corrected rerun was refused: the directory "already holds a run"."""
    from apps.xiangqi.train_player import main

    missing = str(tmp_path / "no_such.jsonl.gz")
    config = edited_player_config(tmp_path, "bad", train, **{key: missing}, **other)
    assert main(["--config", str(config)]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith("error: cannot read") and missing in line
    assert not (tmp_path / "run").exists()


def test_player_num_segments_must_number_its_questions(tmp_path: Path) -> None:
    """A model.num_segments below the row's questions failed at the first step."""
    config = edited_player_config(tmp_path, "aux", {"model": {"num_segments": 2}},
                                  aux="reply", aux_share=0.5)
    with pytest.raises(DecisionInputError, match="num_segments is 2: .* need 3"):
        load_player_config(config)
    load_player_config(edited_player_config(tmp_path, "no_aux", {"model": {"num_segments": 2}}))


def test_player_resume_reports_changes_to_the_xiangqi_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The xiangqi section was not saved with the checkpoint: a resume with another seed or
    mirror share said nothing, unlike a change to any other section."""
    from apps.xiangqi.train_player import train

    train(player_config(tmp_path))
    saved = json.loads((tmp_path / "run" / "checkpoint" / "train_config.json").read_text())
    assert saved["xiangqi"]["seed"] == 11 and saved["xiangqi"]["train_positions"] == 8
    capsys.readouterr()
    train(edited_player_config(tmp_path, "seed", {"run": {"max_steps": 3}}, seed=99,
                               mirror_share=0.5), resume=True)
    said = capsys.readouterr().err
    assert "xiangqi.mirror_share 0.0 -> 0.5; xiangqi.seed 11 -> 99" in said
    assert "xiangqi.mirror_share, xiangqi.seed changed: the rows of the steps" in said
    train(edited_player_config(tmp_path, "val", {"run": {"max_steps": 4}}, seed=99,
                               mirror_share=0.5, val_positions=3), resume=True)
    said = capsys.readouterr().err
    assert "xiangqi.val_positions 2 -> 3" in said and "rows of the steps" not in said


def test_the_training_keys_cache_is_read_only_for_its_own_games(
    games: list[GameRecord], tmp_path: Path
) -> None:
    """The cache was read whatever games file was named: another training set's "unseen" split
    came out of it without a word."""
    import gzip

    from apps.xiangqi.agreement import cached_training_keys

    def write(name: str, records: list[GameRecord]) -> Path:
        path = tmp_path / name
        with gzip.open(path, "wt", encoding="utf-8") as handle:
            for g in records:
                handle.write(json.dumps({"start_fen": g.start_fen, "moves": list(g.moves),
                                         "category": g.category, "result": g.result}) + "\n")
        return path

    a, b = write("a.jsonl.gz", games[:1]), write("b.jsonl.gz", games[1:3])
    cache = tmp_path / "keys.npy"
    assert cached_training_keys(a, cache) == training_keys(games[:1])
    assert cached_training_keys(b, cache) == training_keys(games[1:3])  # not a's keys
    assert cached_training_keys(b, cache) == training_keys(games[1:3])  # read back
    Path(f"{cache}.source.json").unlink()  # a cache without its record (older ones)
    assert cached_training_keys(a, cache) == training_keys(games[:1])


def test_player_resume_after_a_crash_keeps_one_validation_record_a_step(tmp_path: Path) -> None:
    """A run killed after a validation but before its next checkpoint validated that step again
    when resumed, and evals.jsonl held two records of it."""
    import shutil

    from apps.xiangqi.train_player import train

    config = edited_player_config(tmp_path, "evals", {"run": {"max_steps": 4, "eval_every": 2}})
    train(config, max_steps=2)
    run = tmp_path / "run"
    shutil.copytree(run / "checkpoint", tmp_path / "at2")
    train(config, resume=True)  # validates step 4, then checkpoints it
    shutil.rmtree(run / "checkpoint")  # killed before that checkpoint
    shutil.copytree(tmp_path / "at2", run / "checkpoint")
    train(config, resume=True)
    steps = [json.loads(line)["step"] for line in (run / "evals.jsonl").read_text().splitlines()]
    assert steps == [2, 4]
