-- One generic plan through the SECURITY DEFINER helper ({helper} composed as an identifier): the text is
-- a bound value, never part of this statement; the helper EXPLAINs it as its owner, the explain role.
SELECT /* pg-regression-radar */ {helper}(%(query)s, %(search_path)s)
