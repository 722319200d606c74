"""floodgate.parse_limit and parse_limits: rate strings as the `limits`
package writes them ("10/second", "100 per minute", "5/2 seconds"), each
the Limit of the algorithm asked for (a fixed window by default); bad
strings raise InvalidError saying why. No server needed: decisions on mem:."""

import pytest

import floodgate
from floodgate import InvalidError, parse_limit, parse_limits

S, M, H, D = 1000.0, 60000.0, 3600000.0, 86400000.0


@pytest.mark.parametrize("text,count,window_ms", [
    ("10/second", 10, S),
    ("10/seconds", 10, S),
    ("100 per minute", 100, M),
    ("100 per minutes", 100, M),
    ("5/2 seconds", 5, 2 * S),
    ("5/2 second", 5, 2 * S),
    ("1000/hour", 1000, H),
    ("1000 per 1 hours", 1000, H),
    ("10/day", 10, D),
    ("10 per 30 seconds", 10, 30 * S),
    ("3 per 2 days", 3, 2 * D),
    ("1/month", 1, 30 * D),
    ("2/years", 2, 360 * D),
    ("10/SECOND", 10, S),
    ("10 Per Minute", 10, M),
    ("  7  /  3  Hours  ", 7, 3 * H),
    ("7\t/\t3\tminutes", 7, 3 * M),
    ("010/second", 10, S),
    ("9223372036854775807/second", 2**63 - 1, S),
    ("1/1000000000 seconds", 1, 1e12),
])
def test_forms(text, count, window_ms):
    limit = parse_limit(text)
    assert limit == floodgate.fixed_window(count, window_ms)
    assert (limit.algorithm, limit.limit, limit.window_ms) == ("fixed_window", count, window_ms)


def test_algorithms():
    assert parse_limit("10/minute", "fixed_window") == floodgate.fixed_window(10, M)
    assert parse_limit("10/minute", algorithm="sliding_window") == floodgate.sliding_window(10, M)
    assert parse_limit("10/minute", algorithm="sliding_log") == floodgate.sliding_log(10, M)
    # a burst of the count, refilled over the window
    assert parse_limit("10/minute", algorithm="token_bucket") == floodgate.token_bucket(10, 10 / 60)
    assert parse_limit("5/2 seconds", algorithm="token_bucket") == floodgate.token_bucket(5, 2.5)
    assert parse_limit("10/minute", algorithm="leaky_bucket") == floodgate.leaky_bucket(10, 10 / 60)
    assert parse_limit("10/minute", algorithm="gcra") == floodgate.gcra(10, 10, M)
    with pytest.raises(InvalidError, match="unknown algorithm 'moving-window'"):
        parse_limit("10/minute", algorithm="moving-window")


def test_many():
    assert parse_limits("10/second;100/minute") == [floodgate.fixed_window(10, S),
                                                    floodgate.fixed_window(100, M)]
    assert parse_limits("10/second, 100 per minute | 1000/hour", "token_bucket") == [
        floodgate.token_bucket(10, 10), floodgate.token_bucket(100, 100 / 60),
        floodgate.token_bucket(1000, 1000 / 3600)]
    assert parse_limits("10/second") == [floodgate.fixed_window(10, S)]
    with pytest.raises(InvalidError, match="invalid rate limit ''"):
        parse_limits("10/second;")
    with pytest.raises(InvalidError, match="unknown unit 'fortnight'"):
        parse_limits("10/second;10/fortnight")


def test_decisions():
    with floodgate.Client("mem:", clock=lambda: 1_700_000_000_000_000) as client:
        limit = parse_limit("3/second")
        assert [client.check("rates:fixed", limit).allowed for _ in range(4)] == \
            [True, True, True, False]
        bucket = parse_limit("2 per 10 seconds", "token_bucket")
        results = [client.check("rates:bucket", bucket) for _ in range(3)]
        assert [r.allowed for r in results] == [True, True, False]
        assert results[-1].retry_after_ms == 5000  # one unit per 5 s
        # a policy takes them too
        client.policy_set("rates", floodgate.PolicyDef(parse_limits("2/second;100/day")))
        assert [client.policy_check("rates", "rates:p").allowed for _ in range(3)] == \
            [True, True, False]


@pytest.mark.parametrize("text,why", [
    ("0/second", "the count must be from 1 to 9223372036854775807"),
    ("-1/minute", "the count must be from 1 to 9223372036854775807"),
    ("%d/second" % 2**64, "the count must be from 1 to 9223372036854775807"),
    ("%d/second" % 2**63, "the count must be from 1 to 9223372036854775807"),
    ("1" * 5000 + "/second", "the count must be from 1"),
    ("10/fortnight", "unknown unit 'fortnight' (second, minute, hour, day, month, year)"),
    ("10/ms", "unknown unit 'ms'"),
    ("10/secs", "unknown unit 'secs'"),
    ("10/0 seconds", "the number of seconds must be at least 1"),
    ("10/-2 minutes", "the number of minutes must be at least 1"),
    ("10/1000000001 seconds", "the window must be at most 1000000000000 ms"),
    ("ten per second", "expected 'count/[n] unit' or 'count per [n] unit'"),
    ("10 seconds", "expected"),
    ("10", "expected"),
    ("", "expected"),
    ("/second", "expected"),
    ("10/", "expected"),
    ("+10/second", "expected"),
    ("1.5/second", "expected"),
    ("10/1.5 seconds", "expected"),
    ("10//second", "expected"),
    ("10/second/minute", "expected"),
    ("\u0661\u0660/second", "expected"),  # Arabic-Indic digits are not ASCII
    ("10/second;100/minute", "expected"),  # one rate: parse_limits takes several
])
def test_bad(text, why):
    with pytest.raises(InvalidError) as e:
        parse_limit(text)
    assert isinstance(e.value, ValueError)
    assert e.value.message.startswith("ERR invalid rate limit ")
    assert why in e.value.message
    assert len(e.value.message) < 300  # a long string is quoted cut


def test_not_a_string():
    with pytest.raises(TypeError):
        parse_limit(10)
    with pytest.raises(TypeError):
        parse_limits(b"10/second")
