"""Collection: what is read from monitored servers and how it is made safe to keep."""
