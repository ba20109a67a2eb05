"""The independent checker agrees with every generated gold answer, and can disagree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apps.contracts import generate_group
from apps.contracts.checker import CheckError, answer, check, classify_question, main, parse
from apps.contracts.csv_format import CsvGroup, CsvQuestion, write_groups


@pytest.mark.parametrize("level,n", [(1, 1500), (2, 2500)])
def test_checker_agrees_with_every_gold_answer(level: int, n: int) -> None:
    checked = 0
    for seed in range(10_000, 10_000 + n):
        group = generate_group(seed, level)
        parsed = parse(group.document)
        for q in group.questions:
            qtype = classify_question(q.text)
            assert qtype == q.qtype, (group.group_id, q.text)
            got = answer(parsed, qtype)
            assert got == q.gold and type(got) is type(q.gold), (group.group_id, q.id, got,
                                                                 q.gold, group.document)
            checked += 1
    assert checked > 3 * n


def _first(qtype: str, level: int = 2):
    for seed in range(5000):
        group = generate_group(seed, level)
        for q in group.questions:
            if q.qtype == qtype:
                return group, q
    raise AssertionError(f"no {qtype} question in 5000 seeds")


def test_checker_sees_a_changed_number() -> None:
    """Changing the required notice in the text flips the timeliness the checker computes."""
    group, q = _first("notice_timely")
    while q.gold == "not stated":
        group, q = _first("notice_timely", level=1 if group.level == 2 else 2)
    required = parse(group.document).required_notice
    assert required is not None
    new_days = "0 days" if q.gold == "no" else "89 days"
    lines = [
        re.sub(rf"\b{required} days", new_days, ln)
        if "renew" in ln and "deposit" not in ln and "cancellation" not in ln else ln
        for ln in group.document.splitlines()
    ]
    changed = "\n".join(lines)
    assert changed != group.document
    assert check(changed, q.text)[1] != q.gold



# Generated events never cross a month's end (nda._event, periodic.sample keep them in one
# month), so the checker's date arithmetic across months and years is pinned here by hand.
LEASE_ACROSS_YEARS = """RESIDENTIAL LEASE AGREEMENT

1. Fatima Silva, as Landlord, leases the premises at 58 Lake Drive to Sofia Farah, as Tenant.
2. This Lease runs from January 16, 2024 to January 15, 2025.
3. Rent: $1400 per month, payable on the 1st of each month.
4. Automatic renewal: unless the Tenant gives notice of non-renewal at least 25 days before the \
term ends, the Lease continues for a further year.

Record of events:
On December 20, 2024, the Tenant gave written notice of non-renewal.{stated}
"""

NDA_ACROSS_MONTHS = """Confidentiality Agreement

1. Effective August 2, 2024, Orchard LLC (the "Disclosing Party") will share confidential \
information with Summit LLC (the "Receiving Party").
2. Return of materials: within 7 days from a written request.

Facts:
The Disclosing Party asked in writing for the materials back on February 27, 2024. They were \
returned on March 5, 2024.{stated}
"""


def test_checker_counts_days_across_month_and_year_ends() -> None:
    lease = LEASE_ACROSS_YEARS.format(stated="")
    assert check(lease, "How many days before the end of the term did the Tenant give its "
                        "notice?") == ("notice_given_days", 26)  # 11 in 2024, 15 in 2025
    assert check(lease, "Was the Tenant's notice given on time under the renewal clause?") == (
        "notice_timely", "yes")
    assert check(lease, "Does the Lease renew for another term after the end date?") == (
        "renews", "no")
    nda = NDA_ACROSS_MONTHS.format(stated="")
    # February 2024 has 29 days: the 27th to March 5th is 7 days, just within the deadline
    assert check(nda, "How many days after the written request were the materials returned?") \
        == ("return_days_taken", 7)
    assert check(nda, "Were the materials returned within the deadline the Agreement sets?") \
        == ("return_timely", "yes")


def test_checker_refuses_a_document_whose_stated_count_contradicts_its_dates() -> None:
    """A stated count ("That took 9 days.") must agree with the dates it sums up: a document
    where it does not is ambiguous, and the checker says so rather than picking one."""
    question = "How many days before the end of the term did the Tenant give its notice?"
    agreeing = LEASE_ACROSS_YEARS.format(stated=" That was 26 days before the end of the term.")
    assert check(agreeing, question)[1] == 26
    with pytest.raises(CheckError, match="disagree"):
        check(LEASE_ACROSS_YEARS.format(stated=" That was 20 days before the end of the term."),
              question)
    assert parse(NDA_ACROSS_MONTHS.format(stated=" That took 7 days.")).events == {"return": 7}
    with pytest.raises(CheckError, match="disagree"):
        parse(NDA_ACROSS_MONTHS.format(stated=" That took 6 days."))
    late = LEASE_ACROSS_YEARS.format(stated="") + "Late payments ({n}): March and July.\n"
    assert parse(late.format(n=2)).late_count == 2
    with pytest.raises(CheckError, match="disagrees"):
        parse(late.format(n=3))

def test_checker_reports_what_it_cannot_read() -> None:
    group, q = _first("late_fee_amount")
    stripped = "\n".join(ln for ln in group.document.splitlines() if "late fee" not in ln)
    with pytest.raises(CheckError):
        check(stripped, q.text)
    with pytest.raises(CheckError):
        classify_question("What colour is the front door?")
    with pytest.raises(CheckError):
        parse("SALES CONTRACT\n\nThe buyer pays $5.")


def test_checker_cli_reports_unreadable_input_in_one_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing CSV, or a document the checker cannot read: exit 2 with one line, no traceback."""
    assert main([str(tmp_path / "missing.csv")]) == 2
    assert capsys.readouterr().err.startswith("error: cannot open ")
    err = _checked_rent_question("g7", "SALES CONTRACT\n\nThe buyer pays $5.", tmp_path, capsys)
    assert err.startswith("error: group g7: unknown agreement title") and err.count("\n") == 1


def _checked_rent_question(group_id: str, document: str, folder: Path,
                           capsys: pytest.CaptureFixture[str]) -> str:
    """The checker CLI's stderr on a one-group CSV asking the monthly rent of ``document``,
    which it must refuse (status 2)."""
    group = CsvGroup(group_id, document, [
        CsvQuestion("q1", "What is the monthly rent under the Lease, in dollars?",
                    {"type": "integer", "minimum": 0, "maximum": 10000}, 5)])
    path = folder / f"{group_id}.csv"
    write_groups([group], path)
    assert main([str(path)]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("line", [
    "This Lease runs from February 30, 2025 to March 31, 2025.",  # no such day
    "Rent: $" + "9" * 5000 + " per month, payable on the 10th of each month.",  # > 4,300 digits
    "Rent: $900 per month, payable on the " + "1" * 5000 + "th of each month.",
])
def test_an_impossible_date_or_a_huge_number_is_a_check_error(
        line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """parse() raised ValueError (a traceback from the CLI) for a date that does not exist or a
    number of more than 4,300 digits; it is a CheckError, and the CLI says it in one line."""
    document = f"RESIDENTIAL LEASE AGREEMENT\n\n{line}\n"
    with pytest.raises(CheckError):
        parse(document)
    err = _checked_rent_question("g1", document, tmp_path, capsys)
    assert err.startswith("error: group g1: ") and err.count("\n") == 1


def test_checker_cli_leaves_out_questions_without_gold(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An empty gold cell (a CSV to be scored, not yet labelled) was counted as a disagreement
    ("gold None, checker 'yes'") and the run exited 1; such questions are left out, and a file
    with no gold at all is an error."""
    from apps.contracts.csv_format import read_groups

    path = tmp_path / "gold.csv"
    write_groups([generate_group(seed, 2) for seed in (1, 2)], path)
    groups = read_groups(path)
    unlabelled = groups[0].questions[0]
    unlabelled.gold = None
    write_groups(groups, path)
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    total = sum(len(g.questions) for g in groups)
    assert out == (f"{total - 1}/{total - 1} gold answers agree with the checker "
                   "(1 question without gold left out)\n")
    for group in groups:
        for q in group.questions:
            q.gold = None
    write_groups(groups, path)
    assert main([str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"error: {path} holds no gold answers to check\n"
