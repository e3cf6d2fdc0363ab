"""The one fit rule: the simulated minimum memory against the card, with its error band (hand arithmetic)."""

from memdoc.core.billing.verdict import MIN_MEMORY_ERROR, Fit, fit_answer

GiB = 1024**3


def test_the_three_answers_at_the_edges():
    card = 80 * GiB
    assert MIN_MEMORY_ERROR == 0.10
    assert fit_answer(70 * GiB, card).fit is Fit.COMFORTABLE  # 10 GiB headroom > the 7 GiB band of 70 GiB
    assert fit_answer(73 * GiB, card).fit is Fit.CLOSE_CALL  # 7 GiB headroom < the 7.3 GiB band of 73 GiB
    just_over = fit_answer(card + GiB, card)
    assert just_over.fit is Fit.CLOSE_CALL and not just_over.fits  # 1 GiB over, inside an 8.1 GiB band
    assert fit_answer(card - GiB, card).fits
    assert fit_answer(100 * GiB, card).fit is Fit.NO  # 20 GiB over a 10 GiB band
