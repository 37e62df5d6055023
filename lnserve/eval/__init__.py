"""``lnserve.eval``: public entry points for evaluating lnserve models with outside tools.

``lnserve.eval.senteval`` gives SentEval's ``prepare`` and ``batcher``. The implementation lives with the
protocols in ``lnserve.app.evaluation`` (``app/evaluation/``); this package only names it, so a user's
import path stays short and independent of the app's layout.
"""
