"""An HTML document's elements and text, for tests that check what a renderer made of hostile input."""

from __future__ import annotations

from html.parser import HTMLParser


class Elements(HTMLParser):
    """Every start tag with its attributes, in order, and the text (entities resolved)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def tags(self) -> list[str]:
        return [tag for tag, _ in self.elements]

    @property
    def attribute_names(self) -> list[str]:
        return [name for _, attrs in self.elements for name in attrs]


def parse_html(html: str) -> Elements:
    parsed = Elements()
    parsed.feed(html)
    parsed.close()
    return parsed
