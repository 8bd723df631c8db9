"""What deploys the function, run where the template is rendered or the app synthesized: the
stream event's filter criteria and the template checks.

Never shipped to Lambda (an import contract in ``pyproject.toml``).
"""
