"""The operator skill bundle (Markdown and its lock); a package only so that it installs with bashgym."""
