"""The wire contract every adapter imports: the HTTP and aiohttp clients, wire errors, request and response
models. The bot, the CLI and any agent surface talk to the daemon through this package only."""
