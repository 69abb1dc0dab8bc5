"""The BashGym daemon: the server. Its root wires settings, authority, services and the training service;
its subjects are folders: api/ (the HTTP surface), lanes/ (supervision), campaigns/, evidence/, notices/."""
