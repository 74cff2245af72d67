"""EasyData's core abstractions under their documented import path (`easydata.core.protocols`)."""
