"""scripts/zs_headers.py: the public headers include/zeroshard/*.h read as
declarations (functions, enums, macros, typedefs) for scripts/gen-fortran.

Strict on purpose: the headers are regular, and whatever it does not know (a
type, a preprocessor condition, a macro's value, a declaration's shape) stops
it with the header, the line and what to do, rather than guessing at an ABI.
Needs only python3's standard library."""
import bisect, os, re

# The C scalar types a parameter may have by value (gen-fortran's SCALARS maps
# each to Fortran; it checks that the two lists agree).
SCALAR_NAMES = {'int', 'unsigned', 'unsigned int', 'int32_t', 'int64_t', 'uint16_t', 'uint64_t', 'size_t',
                'float', 'double', 'MPI_Fint'}

# Preprocessor conditions the headers use, and whether their text is C's
# (the guards and the GNU attribute) or C++'s (skipped).
CONDITIONS = [
    (re.compile(r'#ifndef ZEROSHARD_\w+_H$'), True),
    (re.compile(r'#ifdef __cplusplus$'), False),
    (re.compile(r'#if defined\(__cplusplus\)( && .*)?$'), False),
    (re.compile(r'#if defined\(__GNUC__\) \|\| defined\(__clang__\)$'), True),
    (re.compile(r'#ifndef (OMPI|MPICH)_SKIP_MPICXX$'), True),
]
# C's words that are never a parameter's name (a parameter without one ends in them)
C_WORDS = {'const', 'void', 'char', 'short', 'int', 'long', 'float', 'double', 'signed', 'unsigned',
           'struct', 'enum', 'union', 'volatile', 'restrict'}

class GenError(Exception):
    pass


# ---- reading a header ----------------------------------------------------------------

def strip_comments(text):
    """Comments to spaces (newlines kept, so lines still count), strings left whole."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('/*', i):
            j = text.find('*/', i + 2)
            if j < 0:
                raise GenError('unterminated comment')
            out.append(re.sub(r'[^\n]', ' ', text[i:j + 2]))
            i = j + 2
        elif text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i))
            i = j
        elif c in '"\'':
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return ''.join(out)


class Header:
    """One header: its C text (C++-only parts dropped, directives out) as
    statements with their line numbers, and its object- and function-like macros."""

    def __init__(self, path):
        self.path = path
        self.name = os.path.basename(path)
        text = strip_comments(open(path, encoding='utf-8').read())
        self.macros = []      # (name, value, line) in order
        self.list_macros = {}  # function-like: name -> body
        body = []              # (line, text)
        stack = []             # active flag per open condition
        lines = text.split('\n')
        i = 0
        while i < len(lines):
            start = i + 1
            line = lines[i]
            while line.endswith('\\'):  # a continued line
                i += 1
                line = line[:-1] + ' ' + lines[i]
            i += 1
            s = ' '.join(line.split())
            active = all(stack)
            if not s.startswith('#'):
                if active and s:
                    body.append((start, s))
                continue
            if s.startswith(('#if', '#ifdef', '#ifndef')):
                for rx, c_text in CONDITIONS:
                    if rx.match(s):
                        stack.append(c_text)
                        break
                else:
                    raise GenError(f'{self.name}:{start}: unknown preprocessor condition "{s}": '
                                   'teach scripts/gen-fortran (CONDITIONS) whether its text is C\'s')
            elif s == '#endif':
                if not stack:
                    raise GenError(f'{self.name}:{start}: #endif without #if')
                stack.pop()
            elif s.startswith(('#else', '#elif')):
                raise GenError(f'{self.name}:{start}: "{s}": scripts/gen-fortran reads no #else branches')
            elif not active or s.startswith(('#include', '#undef')):
                pass
            elif s.startswith('#define '):
                m = re.match(r'#define (\w+)\(([^)]*)\) ?(.*)$', s)
                if m:
                    self.list_macros[m.group(1)] = m.group(3)
                else:
                    m = re.match(r'#define (\w+) ?(.*)$', s)
                    self.macros.append((m.group(1), m.group(2).strip(), start))
            else:
                raise GenError(f'{self.name}:{start}: unknown directive "{s}"')
        if stack:
            raise GenError(f'{self.name}: a condition is not closed')
        self.statements = split_statements(body, self.name)


def split_statements(body, name):
    """Top-level statements (split at ';' outside braces and parentheses) with
    the line each starts on."""
    text, offsets, pos = [], [], 0
    for line, s in body:
        offsets.append((pos, line))
        text.append(s)
        pos += len(s) + 1
    text = '\n'.join(text)
    starts = [o for o, _ in offsets]

    def line_at(off):
        return offsets[bisect.bisect_right(starts, off) - 1][1]

    out, depth, begin = [], 0, 0
    for i, c in enumerate(text):
        if c in '({':
            depth += 1
        elif c in ')}':
            depth -= 1
        elif c == ';' and depth == 0:
            stmt = ' '.join(text[begin:i].split())
            lead = len(text[begin:i]) - len(text[begin:i].lstrip())
            if stmt:
                out.append((line_at(begin + lead), stmt))
            begin = i + 1
        if depth < 0:
            raise GenError(f'{name}:{line_at(i)}: unbalanced "{c}"')
    rest = text[begin:].strip()
    if rest:
        raise GenError(f'{name}:{line_at(begin)}: text after the last declaration: "{rest[:60]}"')
    return out


# ---- declarations ---------------------------------------------------------------------

class CType:
    """A declarator's type: base name, whether the base is const, and one
    entry per '*' (True where that pointer itself is const)."""

    def __init__(self, tokens, where):
        self.base_const = False
        words, self.ptrs = [], []
        for t in tokens:
            if t == '*':
                self.ptrs.append(False)
            elif t == 'const':
                if self.ptrs:
                    self.ptrs[-1] = True
                else:
                    self.base_const = True
            elif self.ptrs:
                raise GenError(f'{where}: "{t}" after a "*"')
            else:
                words.append(t)
        if not words:
            raise GenError(f'{where}: no type')
        self.base = ' '.join(words)

    def c(self):
        stars = ''.join('*const ' if const else '*' for const in self.ptrs)
        return f"{'const ' if self.base_const else ''}{self.base} {stars}".rstrip()


def parse_declarator(text, where):
    """'const char *name' -> (CType, 'name'); a function pointer -> ('funptr', name)."""
    m = re.match(r'^(.*?)\(\s*\*\s*(\w+)\s*\)\s*\((.*)\)$', text)
    if m:
        return 'funptr', m.group(2)
    tokens = re.findall(r'\w+|\*|\S', text)
    bad = [t for t in tokens if not re.match(r'\w+$|\*$', t)]
    if bad:
        raise GenError(f'{where}: cannot read "{text}" ("{bad[0]}")')
    name = tokens[-1]
    if len(tokens) < 2 or name == '*' or name in C_WORDS or name in SCALAR_NAMES or name.endswith('_t'):
        raise GenError(f'{where}: "{text}" has no name: name every parameter in the header')
    return CType(tokens[:-1], where), name


def split_commas(text):
    out, depth, begin = [], 0, 0
    for i, c in enumerate(text):
        if c in '({[':
            depth += 1
        elif c in ')}]':
            depth -= 1
        elif c == ',' and depth == 0:
            out.append(text[begin:i].strip())
            begin = i + 1
    out.append(text[begin:].strip())
    return [s for s in out if s] if text.strip() else []


class Function:
    def __init__(self, header, line, ret, name, params, variadic):
        self.header, self.line, self.ret, self.name = header, line, ret, name
        self.params, self.variadic = params, variadic  # params: [(CType | 'funptr', name)]

    def where(self):
        return f'{self.header}:{self.line}: {self.name}'


class Api:
    def __init__(self):
        self.handles = set()     # typedef struct x x_t (opaque)
        self.structs = {}        # name -> (header, line, body)
        self.enums = set()       # enum type names
        self.funptrs = set()     # function pointer types
        self.constants = []      # (header, line, kind, name, value, enum type)
        self.functions = []
        self.skipped_macros = []  # initializer macros, not mirrored

    # one statement of a header
    def read(self, h, line, s):
        where = f'{h.name}:{line}'
        m = re.match(r'typedef struct (\w+) (\w+)$', s)
        if m:
            self.handles.add(m.group(2))
            return
        m = re.match(r'typedef struct \{(.*)\} (\w+)$', s)
        if m:
            self.structs[m.group(2)] = (h.name, line, m.group(1))
            return
        m = re.match(r'(typedef )?enum \{(.*)\} ?(\w*)$', s)
        if m:
            if bool(m.group(1)) != bool(m.group(3)):
                raise GenError(f'{where}: an enum is either "typedef enum {{...}} name" or "enum {{...}}"')
            if m.group(3):
                self.enums.add(m.group(3))
            self.read_enum(h, line, where, m.group(2), m.group(3) or None)
            return
        m = re.match(r'typedef (.+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)$', s)
        if m:
            self.funptrs.add(m.group(2))
            return
        m = re.match(r'typedef (\w+) (\w+)$', s)
        if m:
            old, new = m.groups()
            for kind in (self.funptrs, self.enums, self.handles):
                if old in kind:
                    kind.add(new)
                    return
            raise GenError(f'{where}: typedef of unknown type "{old}"')
        s = re.sub(r' ?__attribute__ ?\(\(.*\)\)$', '', s)
        m = re.match(r'(.+?) ?\b(\w+) ?\((.*)\)$', s)
        if m and not m.group(1).startswith('typedef'):
            ret_text, name, ptext = m.groups()
            ret = CType(re.findall(r'\w+|\*', ret_text), f'{where}: {name}')
            params, variadic = [], False
            items = split_commas(ptext)
            if items == ['void']:
                items = []
            for p in items:
                if p == '...':
                    variadic = True
                else:
                    params.append(parse_declarator(p, f'{where}: {name}'))
            self.functions.append(Function(h.name, line, ret, name, params, variadic))
            return
        raise GenError(f'{where}: cannot read the declaration "{s[:80]}": '
                       'teach scripts/gen-fortran its form')

    def read_enum(self, h, line, where, body, tname):
        # an X-macro list inside the enum (ZS_STATUS_LIST(ZS_STATUS_ENUM_)) expands to its names
        def expand(m):
            lst = m.group(1)
            if lst not in h.list_macros:
                raise GenError(f'{where}: "{m.group(0)}" in an enum: not an X-macro list of this header')
            names = re.findall(r'\bX\(\s*(\w+)\s*,', re.sub(r'"(\\.|[^"\\])*"', '""', h.list_macros[lst]))
            if not names:
                raise GenError(f'{where}: {lst} lists no X(NAME, ...) entries')
            return ', '.join(names) + ','
        body = re.sub(r'\b(\w+)\s*\(\s*\w+\s*\)', expand, body)
        value = -1
        for item in split_commas(body):
            m = re.match(r'(\w+)(?: ?= ?(-?\d+))?$', item)
            if not m:
                raise GenError(f'{where}: enumerator "{item}": only NAME or NAME = <integer> are read')
            value = int(m.group(2)) if m.group(2) is not None else value + 1
            self.constants.append((h.name, line, 'int', m.group(1), value, tname))

    def read_macro(self, h, name, value, line):
        if not name.startswith('ZS_'):
            return  # include guards, OMPI_SKIP_MPICXX
        where = f'{h.name}:{line}'
        if value.startswith('{'):  # a struct's initializer
            self.skipped_macros.append(name)
            return
        m = re.match(r'^\(?\s*(-?\d+)[uUlL]*\s*\)?$', value)
        if m:
            self.constants.append((h.name, line, 'int', name, int(m.group(1)), None))
            return
        m = re.match(r'^\(\s*(\d+)[uU]?\s*<<\s*(\d+)\s*\)$', value)
        if m:
            self.constants.append((h.name, line, 'int', name, int(m.group(1)) << int(m.group(2)), None))
            return
        m = re.match(r'^\(?\s*(-?\d+\.\d*(?:[eE][-+]?\d+)?)[fF]\s*\)?$', value)
        if m:
            self.constants.append((h.name, line, 'float', name, m.group(1), None))
            return
        raise GenError(f'{where}: macro {name} = "{value}": not an integer, a shift or a float: '
                       'teach scripts/gen-fortran (read_macro) its form')
