"""Function words per language, which carry no checkable fact.

Lists come from the `stopwordsiso` package (stopwords-iso, MIT). Those lists are generous
and include number words ("dos", "elva") and a few content words; numbers are exactly what
hallucinations get wrong, so number words are removed from them here.
"""

from __future__ import annotations

from functools import lru_cache

from mushroom.text.normalize import normalize_word

# Cardinal/ordinal number words that stopword lists contain; a wrong number must stay visible.
_NUMBER_WORDS = {
    "en": "one two three four five six seven eight nine ten eleven twelve first second third fourth "
    "fifth hundred thousand million billion",
    "es": "uno una dos tres cuatro cinco seis siete ocho nueve diez primero primera segundo segunda "
    "tercero tercera cuarto quinto cien ciento mil millón millones",
    "ca": "un una dos tres quatre cinc sis set vuit nou deu primer primera segon segona tercer cent mil",
    "fr": "un une deux trois quatre cinq six sept huit neuf dix premier première deuxième second "
    "seconde troisième quatrième cinquième cent mille million",
    "it": "uno una due tre quattro cinque sei sette otto nove dieci primo prima secondo seconda "
    "terzo terza quarto quinto cento mille milione",
    "de": "eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf erste ersten erster zweite "
    "zweiten dritte dritten vierte hundert tausend million",
    "sv": "en ett två tre fyra fem sex sju åtta nio tio elva tolv första andra tredje fjärde femte "
    "hundra tusen miljon",
    "fi": "yksi kaksi kolme neljä viisi kuusi seitsemän kahdeksan yhdeksän kymmenen ensimmäinen "
    "toinen kolmas neljäs sata tuhat miljoona",
    "cs": "jeden jedna dva dvě tři čtyři pět šest sedm osm devět deset první druhý třetí sto tisíc",
    "eu": "bat bi hiru lau bost sei zazpi zortzi bederatzi hamar lehen lehenengo bigarren ehun mila",
    "ar": "واحد اثنان ثلاثة أربعة خمسة ستة سبعة ثمانية تسعة عشرة الأول الثاني الثالث مائة ألف مليون",
    "fa": "یک دو سه چهار پنج شش هفت هشت نه ده اول دوم سوم صد هزار میلیون",
    "hi": "एक दो तीन चार पांच पाँच छह सात आठ नौ दस पहला पहली दूसरा दूसरी तीसरा सौ हज़ार हजार लाख करोड़",
    "zh": "一 二 两 三 四 五 六 七 八 九 十 百 千 万 亿 第",
}


@lru_cache(maxsize=32)
def stopwords(lang: str) -> frozenset[str]:
    """Normalised function words of a language (empty for an unknown language)."""
    import stopwordsiso

    lang = lang.lower()
    if not stopwordsiso.has_lang(lang):
        return frozenset()
    numbers = {normalize_word(w) for w in _NUMBER_WORDS.get(lang, "").split()}
    return frozenset(
        normalize_word(w) for w in stopwordsiso.stopwords(lang) if normalize_word(w) not in numbers
    )


@lru_cache(maxsize=32)
def stop_characters(lang: str) -> frozenset[str]:
    """Single-character function words, for scripts without spaces (Chinese)."""
    return frozenset(w for w in stopwords(lang) if len(w) == 1)
