"""Guards where hostile input enters and strict output leaves, below every other layer.

`paths` refuses special files before they are opened, `limits` holds the bounds users may raise
through environment variables, `jsonout` is the one strict-JSON writer. They import only
`errors`, so config, traces, policies and everything above may use them.
"""
