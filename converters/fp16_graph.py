"""An ONNX graph to fp16 by its op schemas: each node runs in fp16 where every type parameter its
float tensors bind allows ``tensor(float16)``, and a Cast goes on exactly the edges where a value's
type and its consumer's wanted type differ.

Why not onnxconverter-common's pass: it converts by op type and patches types afterwards, so a
graph whose shape arithmetic runs in float (a dynamic YOLOv8 export's anchors: Shape -> Cast ->
Range/Mul) ends with nodes whose inputs disagree ("W has inconsistent type tensor(float16)"), and
an ``If`` it cannot see into was kept whole in fp32. Here the schema says what each input takes:
Range's T has no float16 (kept fp32), Resize's ``scales`` is ``tensor(float)`` (its own Cast),
and a Cast node keeps the type its ``to`` names. Subgraph ops (If, Loop, Scan) stay fp32 with their
bodies; the precision share check (onnx_check.precision_share) says when that leaves too little
in fp16.
"""

from __future__ import annotations

FLOAT, FLOAT16 = 1, 10           # onnx.TensorProto.FLOAT / FLOAT16
SUBGRAPH_OPS = ("If", "Loop", "Scan", "SequenceMap")
# ops whose output type an attribute sets, not a type parameter: kept fp32 (Cast keeps its ``to``);
# ConstantOfShape converts with its ``value`` (YOLOv8's anchor grid: ConstantOfShape -> Add)
_ATTRIBUTE_TYPED = ("Cast", "Constant", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                    "EyeLike", "Bernoulli", "Multinomial")


def _opset(model, domain: str = "") -> int:
    return next((o.version for o in model.opset_import if o.domain in (domain, "ai.onnx" if not domain else domain)),
                21)


def _schema(node, version: int):
    import onnx

    try:
        return onnx.defs.get_schema(node.op_type, version, node.domain or "")
    except Exception:   # noqa: BLE001 - a custom op: no schema, never converted
        return None


def _formal(params, index: int):
    """The formal parameter of a node's ``index``-th input or output (variadic ones repeat the last)."""
    if not params:
        return None
    return params[min(index, len(params) - 1)]


def _float16_params(schema, node, types: dict) -> set[str] | None:
    """The type parameters of ``node`` that become float16 when it runs in fp16: those binding an
    fp32 input or output. None when one of them does not allow float16 (the node stays fp32)."""
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    params: set[str] = set()
    for values, formals in ((node.input, schema.inputs), (node.output, schema.outputs)):
        for i, name in enumerate(values):
            formal = _formal(formals, i)
            if not name or formal is None or types.get(name) != FLOAT:
                continue
            if formal.type_str in allowed:
                if "tensor(float16)" not in allowed[formal.type_str]:
                    return None
                params.add(formal.type_str)
    return params or None


def convert(model, *, op_block_list=(), node_block_list=(), keep_io_types: bool = True,
            min_positive_val: float = 1e-7, max_finite_val: float = 1e4):
    """``model`` (changed in place) with its float32 compute in float16; returns (model, nodes
    converted, casts inserted)."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    types = {v.name: v.type.tensor_type.elem_type for v in list(inferred.graph.value_info)
             + list(inferred.graph.input) + list(inferred.graph.output)}
    types.update({t.name: t.data_type for t in graph.initializer})
    constants = {n.output[0]: n for n in graph.node if n.op_type == "Constant" and n.attribute
                 and n.attribute[0].name == "value"}
    for name, node in constants.items():
        types[name] = node.attribute[0].t.data_type
    version = _opset(model)
    blocked_ops, blocked_nodes = set(op_block_list) | set(SUBGRAPH_OPS), set(node_block_list)

    # 1. which nodes run in fp16, and what type each of their inputs wants
    wants: dict[tuple[int, int], int] = {}        # (node index, input index) -> wanted elem type
    new_type = dict(types)
    converted = 0
    for k, node in enumerate(graph.node):
        if node.op_type in _ATTRIBUTE_TYPED or node.op_type in blocked_ops or node.name in blocked_nodes:
            continue
        schema = _schema(node, version)
        params = _float16_params(schema, node, types) if schema is not None else None
        if not params:
            continue
        converted += 1
        if node.op_type == "ConstantOfShape":   # its output's type is its value's (float32 0 when absent)
            value = next((a for a in node.attribute if a.name == "value"), None)
            if value is None:
                node.attribute.append(helper.make_attribute("value", numpy_helper.from_array(
                    np.zeros(1, np.float16))))
            elif value.t.data_type == FLOAT:
                value.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(value.t).astype(np.float16),
                                                         value.t.name))
        for i, name in enumerate(node.input):
            formal = _formal(schema.inputs, i)
            if name and formal is not None and formal.type_str in params and types.get(name) == FLOAT:
                wants[(k, i)] = FLOAT16
        for i, name in enumerate(node.output):
            formal = _formal(schema.outputs, i)
            if name and formal is not None and formal.type_str in params and types.get(name) == FLOAT:
                new_type[name] = FLOAT16

    # 2. constants (initializers, Constant nodes) every consumer wants in fp16 become fp16; a value a
    # subgraph reads from this scope (an If body's) is consumed in fp32, the subgraph staying fp32
    consumers: dict[str, list[tuple[int, int]]] = {}
    outer_reads: dict[int, set[str]] = {}
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            consumers.setdefault(name, []).append((k, i))
        reads = {n for sub in _subgraphs(node) for n in _outer_names(sub)}
        if reads:
            outer_reads[k] = reads
            for name in reads:
                consumers.setdefault(name, []).append((k, -1))   # wants stays unset: fp32
    outputs = {o.name for o in graph.output}

    def half(array):
        a = np.asarray(array, dtype=np.float32)
        tiny = (np.abs(a) < min_positive_val) & (a != 0)
        a = np.where(tiny, np.sign(a) * min_positive_val, a)
        return np.clip(a, -max_finite_val, max_finite_val).astype(np.float16)

    for init in graph.initializer:
        uses = consumers.get(init.name, [])
        if init.data_type == FLOAT and uses and all(wants.get(u) == FLOAT16 for u in uses) \
                and init.name not in outputs:
            init.CopyFrom(numpy_helper.from_array(half(numpy_helper.to_array(init)), init.name))
            new_type[init.name] = FLOAT16
    for name, node in constants.items():
        uses = consumers.get(name, [])
        if types.get(name) == FLOAT and uses and all(wants.get(u) == FLOAT16 for u in uses) and name not in outputs:
            node.attribute[0].t.CopyFrom(numpy_helper.from_array(half(numpy_helper.to_array(node.attribute[0].t)),
                                                                 node.attribute[0].t.name))
            new_type[name] = FLOAT16
    # a Cast(to=FLOAT) whose every consumer wants fp16 casts to fp16 instead
    for node in graph.node:
        if node.op_type == "Cast" and node.output[0] not in outputs:
            uses = consumers.get(node.output[0], [])
            to = next(a for a in node.attribute if a.name == "to")
            if to.i == FLOAT and uses and all(wants.get(u) == FLOAT16 for u in uses):
                to.i = FLOAT16
                new_type[node.output[0]] = FLOAT16

    # 3. graph outputs keep their types: an fp16 value is renamed, cast back under its own name
    # right after its producer, and its fp16 consumers read the renamed value
    added: list[tuple[int, object]] = []            # (insert before node index, Cast node)
    taken = {n for node in graph.node for n in list(node.input) + list(node.output)} | {
        i.name for i in graph.initializer} | {i.name for i in graph.input}

    def fresh(name: str) -> str:
        while name in taken:
            name += "_"
        taken.add(name)
        return name

    if keep_io_types:
        for out in graph.output:
            if new_type.get(out.name) != FLOAT16 or types.get(out.name) != FLOAT:
                continue
            inner = fresh(f"{out.name}__fp16")
            producer = next(k for k, n in enumerate(graph.node) if out.name in n.output)
            node = graph.node[producer]
            node.output[:] = [inner if o == out.name else o for o in node.output]
            for k, i in consumers.get(out.name, []):
                if wants.get((k, i)) == FLOAT16:
                    graph.node[k].input[i] = inner
            new_type[inner], new_type[out.name] = FLOAT16, FLOAT
            added.append((producer + 1, helper.make_node("Cast", [inner], [out.name], to=FLOAT,
                                                         name=f"cast_{out.name}")))

    # 4. a Cast on every edge whose value's type is not what its consumer wants
    casts: dict[tuple[str, int], str] = {}
    for k, reads in outer_reads.items():   # an fp16 value a subgraph reads: cast back, renamed inside
        renames = {}
        for name in sorted(reads):
            if new_type.get(name) == FLOAT16 and types.get(name) == FLOAT:
                if (name, FLOAT) not in casts:
                    casts[(name, FLOAT)] = fresh(f"{name}__fp32")
                    added.append((k, helper.make_node("Cast", [name], [casts[(name, FLOAT)]], to=FLOAT,
                                                      name=f"cast_{casts[(name, FLOAT)]}")))
                renames[name] = casts[(name, FLOAT)]
        for sub in _subgraphs(graph.node[k]):
            _rename_reads(sub, renames)
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            if not name:
                continue
            have, want = new_type.get(name), wants.get((k, i), types.get(name))
            if have in (FLOAT, FLOAT16) and want in (FLOAT, FLOAT16) and have != want:
                if (name, want) not in casts:
                    casts[(name, want)] = fresh(f"{name}__{'fp16' if want == FLOAT16 else 'fp32'}")
                    added.append((k, helper.make_node("Cast", [name], [casts[(name, want)]], to=want,
                                                      name=f"cast_{casts[(name, want)]}")))
                node.input[i] = casts[(name, want)]
    nodes = list(graph.node)
    for before, cast in sorted(added, key=lambda x: -x[0]):
        nodes.insert(before, cast)
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.value_info[:]          # recomputed by the checker's shape inference
    return model, converted, len(added)


def _subgraphs(node) -> list:
    """The graphs a node holds (If's branches, Loop's and Scan's bodies)."""
    from onnx import AttributeProto

    out = []
    for attr in node.attribute:
        if attr.type == AttributeProto.GRAPH:
            out.append(attr.g)
        elif attr.type == AttributeProto.GRAPHS:
            out.extend(attr.graphs)
    return out


def _outer_names(graph) -> set[str]:
    """Names a subgraph (and the subgraphs inside it) reads from the scope around it."""
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    local |= {o for node in graph.node for o in node.output}
    reads = set()
    for node in graph.node:
        reads |= {n for n in node.input if n}
        for sub in _subgraphs(node):
            reads |= _outer_names(sub)
    reads |= {o.name for o in graph.output}
    return reads - local


def _rename_reads(graph, renames: dict[str, str]) -> None:
    """Point a subgraph's reads of outer values at their casts (the subgraph's own names untouched)."""
    if not renames:
        return
    local = {i.name for i in graph.input} | {i.name for i in graph.initializer}
    local |= {o for node in graph.node for o in node.output}
    todo = {k: v for k, v in renames.items() if k not in local}
    for node in graph.node:
        node.input[:] = [todo.get(n, n) for n in node.input]
        for sub in _subgraphs(node):
            _rename_reads(sub, todo)
    for out in graph.output:
        if out.name in todo:   # a branch that returns an outer value as is
            out.name = todo[out.name]

