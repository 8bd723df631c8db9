"""Developer tools: DynamoDB Local, fault injection, the flights data and the demo.

Never imported by what ships to Lambda (an import contract in ``pyproject.toml``).
"""
