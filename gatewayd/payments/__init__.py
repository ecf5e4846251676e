"""Money coming in without the operator: card top-ups through Stripe Checkout.

``stripe_settings`` reads ``[payments.stripe]``; ``stripe_api`` is the one place that
talks to Stripe (the official library, synchronous, so always in a worker thread);
``stripe_events`` turns a verified event into ledger entries (pure); ``stripe_webhook``
is ``POST /webhooks/stripe``, which records them exactly once per Stripe object id.
The console's "Add funds" form lives in ``gatewayd.console.views_funds``.
"""
