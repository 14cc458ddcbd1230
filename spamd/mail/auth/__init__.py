"""Who really sent a message: DKIM, DMARC and trusted Authentication-Results, through one DNS resolver.

`verify.Authenticator` is the entry point; what a message says about itself is a
claim until one of these verifies it.
"""
