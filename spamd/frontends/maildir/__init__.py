"""Maildir++: delivery, the watchdog bridge, and folder moves turned into training decisions.

The package, by concern (each module's docstring tells its part of the design):
  - `layout`: the Maildir++ layout, message file names, and the ownership of
    what spamd creates (directories opened without following links).
  - `mailbox`: one user's Maildir (`Mailbox`): its folders, reading, listing and
    removing its messages, the move rule; which Maildir a recipient's mail goes to.
  - `files`: writing a message file into a folder's new/ (`write_file`, the
    function the delivery processes of `spamd.frontends.delivery` run).
  - `seen`: the seen index (where spamd last saw each message), its persistence,
    and the names spamd delivered lately.
  - `deliver`: SMTP delivery into INBOX or Junk.
  - `watcher`: the watchdog bridge, the start-up catch-up, filing unscored INBOX
    mail, and moves turned into training calls.

`layout` and `files` are the low level: at run time `files` imports `layout` and
`layout` nothing of spamd's; neither imports `spamd.frontends.delivery`, which imports
them. This `__init__` imports nothing: import the concrete modules.
"""
