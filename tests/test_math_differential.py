"""The `math` verifier against an independent scorer (scripts/math_differential.py): on
reasoning-gym's items of 12 numeric tasks, with candidates made to break it, the project scores
every candidate by its rules, and every answer reasoning-gym scores otherwise is of a kind whose
disagreement is known and explained (EXPECTED_DISAGREEMENTS: the project is right, and why)."""

from scripts.math_differential import EXPECTED_DISAGREEMENTS, KINDS, TASKS, run, table


def test_the_math_verifier_keeps_its_rules_where_reasoning_gym_does_not():
    results, classes, bugs = run(items=40, seed=1)
    report = table(results, classes, bugs)
    assert bugs == [], report  # the project broke its own rules: a bug
    unexplained = {kind for kind, _, _ in classes} - set(EXPECTED_DISAGREEMENTS)
    assert not unexplained, f"disagreements of unexpected kinds {unexplained}:\n{report}"
    assert all(KINDS[kind][1] != "-" for kind in EXPECTED_DISAGREEMENTS)
    # every task ran, and the factorizations were refused by the contract, not scored
    assert set(results) == set(TASKS) and all(r.answers > 0 for r in results.values())
    factorizations = results["prime_factorization"]
    assert factorizations.several_values > 0 and factorizations.several_accepted == 0
    # the same-value forms the project reads: all of them (reasoning-gym reads far fewer)
    assert sum(r.project_reads for r in results.values()) == sum(
        r.equivalent for r in results.values()
    )
