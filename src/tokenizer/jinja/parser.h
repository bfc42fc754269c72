#pragma once
// Recursive-descent parser for the Jinja subset real chat templates use (jinja2 grammar and
// operator precedence). include/import/extends/block are rejected: a chat template is one file.
#include <string>

#include "tokenizer/jinja/ast.h"

namespace mlxcel::jinja {

Template parse(const std::string& source);

}  // namespace mlxcel::jinja
