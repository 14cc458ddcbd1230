"""spamctl's tables: the fast column form prints what the row form prints; the users reply's columns round-trip."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from spamd.cli.output import column_table, table
from spamd.frontends.control_protocol import USER_COLUMNS, user_columns, user_rows

_CELLS = st.one_of(st.integers(min_value=-(10**12), max_value=10**12), st.text(max_size=12))


@given(st.integers(min_value=0, max_value=30).flatmap(lambda n: st.lists(st.lists(_CELLS, min_size=n, max_size=n),
       min_size=1, max_size=4)))  # fmt: skip
def test_a_table_of_columns_is_the_table_of_its_rows(columns: list[list[object]]) -> None:
    headings = [(f"heading {i}", f"c{i}") for i in range(len(columns))]
    by_key = {key: column for (_, key), column in zip(headings, columns, strict=True)}
    rows = [tuple(title for title, _ in headings)] + [tuple(map(str, row)) for row in zip(*columns, strict=True)]
    assert column_table(headings, by_key) == table(rows)


@given(st.lists(st.fixed_dictionaries({c: st.integers(0, 10**9) for c in USER_COLUMNS if c != "user"}
       | {"user": st.text(max_size=8)}), max_size=20))  # fmt: skip
def test_the_users_reply_columns_round_trip_to_rows(rows: list[dict[str, object]]) -> None:
    assert user_rows(user_columns(rows)) == rows
