"""Trust boundaries: each test performs one attack a token holder could try, with the least-privileged
token that might succeed, against a real daemon on loopback, and asserts that it fails.

One file per boundary; every new route adds its attack here.
"""
