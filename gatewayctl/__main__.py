"""``python -m gatewayctl``: the same as the ``gatewayctl`` command."""

from gatewayctl.main import main

main()
